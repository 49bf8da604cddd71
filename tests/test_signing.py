"""SSH-signature approvals against the real OpenSSH tools: keys come from `ssh-keygen`, signatures go
both ways (ours verified by `ssh-keygen -Y verify`, `ssh-keygen -Y sign` verified by ours), and every
refusal must be the product's own one-line error, never a stray exception from the parser."""

from __future__ import annotations

import base64
import hashlib
import struct
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backfill_assets.errors import AllowedSignersError, PrincipalError, SignatureError
from backfill_assets.signing import (
    NAMESPACE,
    AllowedSigners,
    armor,
    canonical_principal,
    dearmor,
    one_line,
    parse,
    same_principal,
    sign,
    verify,
)

PLAN_SHA = hashlib.sha256(b"replay plan v1").hexdigest()
MESSAGE = PLAN_SHA.encode("ascii")
KEY_TYPES = {
    "ed25519": ["-t", "ed25519"],
    "rsa": ["-t", "rsa", "-b", "2048"],
    "ecdsa256": ["-t", "ecdsa", "-b", "256"],
    "ecdsa384": ["-t", "ecdsa", "-b", "384"],
    "ecdsa521": ["-t", "ecdsa", "-b", "521"],
}


# --- helpers: the OpenSSH side, and an independent SSHSIG builder ------------------------------------


def keygen(directory: Path, name: str, args: list[str], passphrase: str = "") -> Path:
    path = directory / name
    subprocess.run(["ssh-keygen", "-q", *args, "-N", passphrase, "-C", name, "-f", str(path)],
                   check=True, capture_output=True, timeout=60)
    return path


def pub_line(key: Path) -> str:
    return " ".join(key.with_suffix(".pub").read_text().split()[:2])


def ssh_sign(key: Path, message: bytes, namespace: str = NAMESPACE, *extra: str) -> str:
    proc = subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", namespace, *extra],
                          input=message, capture_output=True, check=True, timeout=60)
    return proc.stdout.decode()


def ssh_verify(tmp_path: Path, allowed: str, principal: str, signature: str, message: bytes,
               namespace: str = NAMESPACE) -> subprocess.CompletedProcess[bytes]:
    (tmp_path / "allowed_signers").write_text(allowed)
    (tmp_path / "msg.sig").write_text(signature)
    return subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(tmp_path / "allowed_signers"),
                           "-I", principal, "-n", namespace, "-s", str(tmp_path / "msg.sig")],
                          input=message, capture_output=True, timeout=60)


def ssh_fingerprint(key: Path) -> str:
    proc = subprocess.run(["ssh-keygen", "-lf", str(key.with_suffix(".pub"))], capture_output=True,
                          text=True, check=True, timeout=60)
    return proc.stdout.split()[1]


def s(value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return struct.pack(">I", len(data)) + data


def build_sshsig(public_key: bytes, namespace: str, hash_alg: str, signature: bytes,
                 magic: bytes = b"SSHSIG", version: int = 1) -> bytes:
    """PROTOCOL.sshsig section 2, written out independently of the code under test."""
    fields = (public_key, namespace, b"", hash_alg, signature)
    return magic + struct.pack(">I", version) + b"".join(s(field) for field in fields)


def signed_data(message: bytes, namespace: str = NAMESPACE, hash_alg: str = "sha512") -> bytes:
    """PROTOCOL.sshsig section 3."""
    return b"SSHSIG" + s(namespace) + s(b"") + s(hash_alg) + s(hashlib.new(hash_alg, message).digest())


def one_line_error(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(excinfo.value)
    assert "\n" not in text, text
    return text


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("keys")
    made = {name: keygen(directory, f"alice_{name}", args) for name, args in KEY_TYPES.items()}
    made["bob"] = keygen(directory, "bob", KEY_TYPES["ed25519"])
    made["mallory"] = keygen(directory, "mallory", KEY_TYPES["ed25519"])
    made["encrypted"] = keygen(directory, "encrypted", KEY_TYPES["ed25519"], passphrase="correct horse")
    return made


@pytest.fixture(scope="module")
def signers(keys: dict[str, Path]) -> AllowedSigners:
    text = "".join(f"alice {pub_line(keys[name])}\n" for name in KEY_TYPES) + f"bob {pub_line(keys['bob'])}\n"
    return AllowedSigners.parse("# team approvers\n\n" + text)


# --- interoperability with ssh-keygen, both directions ----------------------------------------------


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_our_signature_verifies_with_ssh_keygen(tmp_path, keys, key_type):
    armored = sign(MESSAGE, keys[key_type])
    allowed = f"alice {pub_line(keys[key_type])}\n"
    good = ssh_verify(tmp_path, allowed, "alice", armored, MESSAGE)
    assert good.returncode == 0, good.stderr
    assert b'Good "backfill-plan" signature for alice' in good.stdout
    assert ssh_verify(tmp_path, allowed, "alice", armored, MESSAGE + b"0").returncode != 0


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_ssh_keygen_signature_verifies_with_ours(keys, signers, key_type):
    armored = ssh_sign(keys[key_type], MESSAGE)
    sig = signers.verify_approval("alice", MESSAGE, armored)
    assert sig.fingerprint == ssh_fingerprint(keys[key_type])
    assert sig.public_key_line == pub_line(keys[key_type])
    assert (sig.namespace, sig.hash_alg) == (NAMESPACE, "sha512")
    assert armor(sig.raw) == armored  # byte-identical armor: 70-column lines, same header and footer
    assert signers.verify_approval("alice", MESSAGE, one_line(armored)) == sig
    assert "\n" not in one_line(armored)


def test_sha256_hash_interoperates(tmp_path, keys, signers):
    theirs = ssh_sign(keys["ed25519"], MESSAGE, NAMESPACE, "-O", "hashalg=sha256")
    assert verify(MESSAGE, theirs).hash_alg == "sha256"
    ours = sign(MESSAGE, keys["rsa"], hash_alg="sha256")
    assert ssh_verify(tmp_path, f"alice {pub_line(keys['rsa'])}\n", "alice", ours, MESSAGE).returncode == 0


def test_fingerprint_matches_ssh_keygen(keys):
    for name in ("ed25519", "rsa", "ecdsa521"):
        assert parse(sign(MESSAGE, keys[name])).fingerprint == ssh_fingerprint(keys[name])


# --- refusals: the signature itself ----------------------------------------------------------------


def test_wrong_message_is_refused(keys, signers):
    armored = ssh_sign(keys["ed25519"], MESSAGE)
    other = hashlib.sha256(b"replay plan v2").hexdigest().encode()
    with pytest.raises(SignatureError) as excinfo:
        signers.verify_approval("alice", other, armored)
    assert "signature does not verify for this message" in one_line_error(excinfo)


@pytest.mark.parametrize("key_type", ["rsa", "ecdsa384"])
def test_wrong_message_is_refused_for_rsa_and_ecdsa(keys, key_type):
    with pytest.raises(SignatureError, match="does not verify"):
        verify(MESSAGE.upper(), sign(MESSAGE, keys[key_type]))


def test_wrong_namespace_is_refused(keys, signers):
    armored = ssh_sign(keys["ed25519"], MESSAGE, "git")
    with pytest.raises(SignatureError) as excinfo:
        signers.verify_approval("alice", MESSAGE, armored)
    assert "namespace 'git', expected 'backfill-plan'" in one_line_error(excinfo)
    assert verify(MESSAGE, armored, namespace="git").namespace == "git"


def test_swapped_public_key_is_refused(keys):
    blob = parse(ssh_sign(keys["ed25519"], MESSAGE))
    bob = base64.b64decode(pub_line(keys["bob"]).split()[1])
    forged = build_sshsig(bob, NAMESPACE, "sha512", blob.signature)
    with pytest.raises(SignatureError, match="does not verify"):
        verify(MESSAGE, armor(forged))


def test_sha1_ssh_rsa_signature_is_refused_like_openssh(tmp_path, keys):
    private = serialization.load_ssh_private_key(keys["rsa"].read_bytes(), password=None)
    public = base64.b64decode(pub_line(keys["rsa"]).split()[1])
    allowed = f"alice {pub_line(keys['rsa'])}\n"

    def made_with(sig_alg: str, digest: hashes.HashAlgorithm) -> str:
        raw = private.sign(signed_data(MESSAGE), padding.PKCS1v15(), digest)
        return armor(build_sshsig(public, NAMESPACE, "sha512", s(sig_alg) + s(raw)))

    sha256 = made_with("rsa-sha2-256", hashes.SHA256())  # control: the hand-built blob is right
    assert verify(MESSAGE, sha256).sig_alg == "rsa-sha2-256"
    assert ssh_verify(tmp_path, allowed, "alice", sha256, MESSAGE).returncode == 0
    sha1 = made_with("ssh-rsa", hashes.SHA1())
    assert ssh_verify(tmp_path, allowed, "alice", sha1, MESSAGE).returncode != 0
    with pytest.raises(SignatureError) as excinfo:
        verify(MESSAGE, sha1)
    assert "'ssh-rsa' (SHA-1" in one_line_error(excinfo)


def test_security_key_signature_is_refused():
    key = s("sk-ssh-ed25519@openssh.com") + s(bytes(32)) + s("ssh:")
    sig = s("sk-ssh-ed25519@openssh.com") + s(bytes(64)) + b"\x01" + struct.pack(">I", 7)
    armored = armor(build_sshsig(key, NAMESPACE, "sha512", sig))
    assert parse(armored).key_type == "sk-ssh-ed25519@openssh.com"
    with pytest.raises(SignatureError) as excinfo:
        verify(MESSAGE, armored)
    assert "security key" in one_line_error(excinfo)


def test_unsupported_hash_is_refused(keys):
    sig = parse(sign(MESSAGE, keys["ed25519"]))
    with pytest.raises(SignatureError, match="hash 'sha1'"):
        verify(MESSAGE, armor(build_sshsig(sig.public_key, NAMESPACE, "sha1", sig.signature)))


def test_a_key_file_replaced_at_the_same_path_signs_with_the_new_key(keys, signers, tmp_path):
    # a process keeps the keys it loaded, by their bytes: a file rewritten in place is read again
    path = tmp_path / "id"
    path.write_bytes(keys["rsa"].read_bytes())
    assert signers.verify_approval("alice", MESSAGE, sign(MESSAGE, path)).public_key == \
        signers.verify_approval("alice", MESSAGE, ssh_sign(keys["rsa"], MESSAGE)).public_key
    path.write_bytes(keys["bob"].read_bytes())
    assert signers.verify_approval("bob", MESSAGE, sign(MESSAGE, path))
    with pytest.raises(SignatureError):
        signers.verify_approval("alice", MESSAGE, sign(MESSAGE, path))
    path.write_bytes(keys["encrypted"].read_bytes())  # and a refused key is refused every time
    for _ in range(2):
        with pytest.raises(SignatureError, match="is encrypted"):
            sign(MESSAGE, path)


def test_encrypted_private_key_is_refused_with_the_ssh_keygen_fix(keys, tmp_path):
    with pytest.raises(SignatureError) as excinfo:
        sign(MESSAGE, keys["encrypted"])
    assert "is encrypted" in one_line_error(excinfo)
    assert "ssh-keygen -Y sign -f KEY -n backfill-plan" in str(excinfo.value)
    with pytest.raises(SignatureError, match="cannot read private key"):
        sign(MESSAGE, tmp_path / "absent")
    (tmp_path / "junk").write_text("not a key")
    with pytest.raises(SignatureError, match="not a usable OpenSSH private key"):
        sign(MESSAGE, tmp_path / "junk")


def test_short_rsa_keys_and_bad_arguments_are_refused(tmp_path, keys):
    short = keygen(tmp_path, "short_rsa", ["-t", "rsa", "-b", "1024"])
    with pytest.raises(SignatureError, match="1024-bit RSA key"):
        sign(MESSAGE, short)
    with pytest.raises(SignatureError, match="RSA key has 1024 bits"):
        verify(MESSAGE, ssh_sign(short, MESSAGE))
    with pytest.raises(SignatureError, match="message is a str"):
        sign(PLAN_SHA, keys["ed25519"])  # type: ignore[arg-type]
    with pytest.raises(SignatureError, match="cannot sign with hash 'md5'"):
        sign(MESSAGE, keys["ed25519"], hash_alg="md5")


def _good_blob(keys: dict[str, Path]) -> bytes:
    return parse(sign(MESSAGE, keys["ed25519"])).raw


MALFORMED = {
    "empty": lambda blob: "",
    "header only": lambda blob: "-----BEGIN SSH SIGNATURE-----\n",
    "no footer": lambda blob: armor(blob).replace("-----END SSH SIGNATURE-----", ""),
    "wrong label": lambda blob: armor(blob).replace("SSH SIGNATURE", "PGP SIGNATURE"),
    "bad base64": lambda blob: armor(blob).replace("U1NIU0lH", "U1N*U0lH"),
    "truncated blob": lambda blob: base64.b64encode(blob[: len(blob) // 2]).decode(),
    "truncated armor": lambda blob: armor(blob)[: len(armor(blob)) // 2],
    "trailing bytes": lambda blob: base64.b64encode(blob + b"\0").decode(),
    "trailing bytes in signature field": lambda blob: armor(build_sshsig(
        parse(armor(blob)).public_key, NAMESPACE, "sha512", parse(armor(blob)).signature + b"\0")),
    "wrong magic": lambda blob: base64.b64encode(b"SSHSIH" + blob[6:]).decode(),
    "version 2": lambda blob: base64.b64encode(blob[:6] + struct.pack(">I", 2) + blob[10:]).decode(),
    "huge length": lambda blob: base64.b64encode(blob[:10] + b"\xff\xff\xff\xff" + blob[14:]).decode(),
    "random bytes": lambda blob: base64.b64encode(hashlib.sha512(b"noise").digest()).decode(),
    "not ascii": lambda blob: "U1NIU0lH\u00e9",
    "over 64 KiB": lambda blob: "A" * (64 * 1024 + 4),
    "valid but padded over 64 KiB": lambda blob: armor(blob) + " " * (64 * 1024),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_signatures_raise_only_signature_error(keys, signers, case):
    text = MALFORMED[case](_good_blob(keys))
    with pytest.raises(SignatureError) as excinfo:
        parse(text)
    one_line_error(excinfo)
    with pytest.raises(SignatureError):
        signers.verify_approval("alice", MESSAGE, text)


@pytest.mark.parametrize("point", [b"\2" + bytes(31) + b"\1", b"\4" + bytes(64), b"", b"\4\1"])
def test_malformed_public_key_is_refused(point):
    key = s("ecdsa-sha2-nistp256") + s("nistp256") + s(point)
    sig = s("ecdsa-sha2-nistp256") + s(s(b"\1") + s(b"\1"))
    with pytest.raises(SignatureError) as excinfo:  # cryptography itself raises NotImplementedError here
        verify(MESSAGE, armor(build_sshsig(key, NAMESPACE, "sha512", sig)))
    assert "ecdsa-sha2-nistp256 public key is malformed" in one_line_error(excinfo)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400), st.binary(max_size=400),
                 st.binary(max_size=300).map(lambda b: base64.b64encode(b"SSHSIG\0\0\0\1" + b).decode())))
def test_parse_only_ever_raises_signature_error(data):
    try:
        parse(data)
    except SignatureError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=300, deadline=None)
@given(key_type=st.sampled_from(["ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp521",
                                 "sk-ssh-ed25519@openssh.com", "ssh-dss", "x"]),
       key=st.binary(max_size=140), sig=st.binary(max_size=140),
       hash_alg=st.sampled_from(["sha256", "sha512"]))
def test_verify_of_well_framed_garbage_only_raises_signature_error(key_type, key, sig, hash_alg):
    blob = build_sshsig(s(key_type) + key, NAMESPACE, hash_alg, s(key_type) + s(sig))
    with pytest.raises(SignatureError):
        verify(MESSAGE, armor(blob))


# --- refusals: allowed_signers ---------------------------------------------------------------------


def test_key_not_in_allowed_signers_is_refused(keys, signers):
    armored = ssh_sign(keys["mallory"], MESSAGE)
    with pytest.raises(SignatureError) as excinfo:
        signers.verify_approval("alice", MESSAGE, armored)
    text = one_line_error(excinfo)
    fingerprint = ssh_fingerprint(keys["mallory"])
    assert f"signed by key {fingerprint}, which allowed_signers does not list for alice" in text


def test_bobs_key_cannot_approve_as_alice(tmp_path, keys, signers):
    armored = ssh_sign(keys["bob"], MESSAGE)
    assert signers.verify_approval("bob", MESSAGE, armored).fingerprint == ssh_fingerprint(keys["bob"])
    with pytest.raises(SignatureError) as excinfo:
        signers.verify_approval("alice", MESSAGE, armored)
    assert "does not list for alice (it is listed for bob)" in one_line_error(excinfo)
    # ssh-keygen agrees on the same file.
    allowed = "".join(f"{p} {pub_line(keys[k])}\n" for p, k in [("alice", "ed25519"), ("bob", "bob")])
    assert ssh_verify(tmp_path, allowed, "alice", armored, MESSAGE).returncode != 0


def test_namespaces_option_restricts_the_key(tmp_path, keys):
    armored = ssh_sign(keys["ed25519"], MESSAGE)
    git_only = f'alice namespaces="git" {pub_line(keys["ed25519"])}\n'
    with pytest.raises(SignatureError) as excinfo:
        AllowedSigners.parse(git_only).verify_approval("alice", MESSAGE, armored)
    assert "only for namespaces git (line 1)" in one_line_error(excinfo)
    assert ssh_verify(tmp_path, git_only, "alice", armored, MESSAGE).returncode != 0
    both = f'alice namespaces="git,backfill-plan" {pub_line(keys["ed25519"])}\n'
    assert AllowedSigners.parse(both).verify_approval("alice", MESSAGE, armored)
    assert ssh_verify(tmp_path, both, "alice", armored, MESSAGE).returncode == 0
    pattern = f'alice namespaces="git,backfill-*" {pub_line(keys["ed25519"])}\n'
    assert AllowedSigners.parse(pattern).verify_approval("alice", MESSAGE, armored)
    assert ssh_verify(tmp_path, pattern, "alice", armored, MESSAGE).returncode == 0
    hostile = f'alice namespaces="{"*a" * 20_000}z" {pub_line(keys["ed25519"])}\n'  # no regex blow-up
    with pytest.raises(SignatureError, match="only for namespaces"):
        AllowedSigners.parse(hostile).verify_approval("alice", MESSAGE, armored)


def test_valid_before_and_after_are_respected(keys):
    armored = ssh_sign(keys["ed25519"], MESSAGE)
    expired = AllowedSigners.parse(f'alice valid-before="20200101" {pub_line(keys["ed25519"])}')
    with pytest.raises(SignatureError) as excinfo:
        expired.verify_approval("alice", MESSAGE, armored)
    assert "expired at 2020-01-01T00:00:00Z" in one_line_error(excinfo)
    assert expired.verify_approval("alice", MESSAGE, armored, at=datetime(2019, 6, 1, tzinfo=UTC))
    window = AllowedSigners.parse(
        f'alice valid-after="202401011200Z",valid-before="20240201000000Z" {pub_line(keys["ed25519"])}')
    with pytest.raises(SignatureError, match="not valid until 2024-01-01T12:00:00Z"):
        window.verify_approval("alice", MESSAGE, armored, at=datetime(2024, 1, 1, 11, 59, tzinfo=UTC))
    assert window.verify_approval("alice", MESSAGE, armored, at=datetime(2024, 1, 15, tzinfo=UTC))
    with pytest.raises(SignatureError, match="expired"):
        window.verify_approval("alice", MESSAGE, armored)  # now


@pytest.mark.parametrize("listed", ["!backfill-plan,*", "*,!backfill-plan", "!backfill-*,backfill-plan"])
def test_a_negated_namespace_refuses_as_openssh_reads_it(keys, listed):
    """`!pattern` in namespaces denies what it matches (OpenSSH's pattern lists); it was read as a
    pattern to allow, so a key the file denied for plans counted (found by an attack)."""
    signers = AllowedSigners.parse(f'alice namespaces="{listed}" {pub_line(keys["ed25519"])}')
    with pytest.raises(SignatureError, match="only for namespaces"):
        signers.verify_approval("alice", MESSAGE, ssh_sign(keys["ed25519"], MESSAGE))
    allowed = AllowedSigners.parse(f'alice namespaces="!git,*" {pub_line(keys["ed25519"])}')
    assert allowed.verify_approval("alice", MESSAGE, ssh_sign(keys["ed25519"], MESSAGE))


@pytest.mark.parametrize("listed", ["git, backfill-plan", "git, *", "backfill-plan ,git", "git,\tbackfill-*",
                                    "backfill-plan," + "a" * 1100, "*," + "a" * 1023])
def test_a_namespaces_list_is_read_as_openssh_reads_it(tmp_path, keys, listed):
    """OpenSSH splits `namespaces="git, backfill-plan"` on commas only: ` backfill-plan`, space and
    all, is the pattern, which no namespace matches, so `ssh-keygen -Y verify` (and git) refuse the
    key for plans; and a pattern of 1,023 characters or more ends its reading of the list unmatched.
    This reader stripped each pattern, and read on past a long one: a key the reviewed file, as
    OpenSSH reads it, does not allow for plans counted (found by an attack)."""
    line = f'alice namespaces="{listed}" {pub_line(keys["ed25519"])}\n'
    signature = ssh_sign(keys["ed25519"], MESSAGE)
    assert ssh_verify(tmp_path, line, "alice", signature, MESSAGE).returncode != 0  # OpenSSH: not for plans
    with pytest.raises(SignatureError, match="only for namespaces"):
        AllowedSigners.parse(line).verify_approval("alice", MESSAGE, signature)


def test_a_second_valid_line_for_the_same_key_is_enough(keys):
    line = pub_line(keys["ed25519"])
    text = f'alice valid-before="20200101" {line}\nalice namespaces="backfill-plan" {line}\n'
    signers = AllowedSigners.parse(text)
    assert signers.verify_approval("alice", MESSAGE, ssh_sign(keys["ed25519"], MESSAGE))


BAD_FILES = {
    "cert-authority": ('alice cert-authority {key}', "line 1: cert-authority lines are not supported"),
    "wildcard": ("# approvers\nalice,*@example.com {key}", "line 2: principal '*@example.com' is a pattern"),
    "question mark": ("ali?e {key}", "line 1: principal 'ali?e' is a pattern"),
    "negation": ("!bob {key}", "line 1: principal '!bob' is a pattern"),
    "unknown option": ("alice no-touch-required {key}", "line 1: unknown option 'no-touch-required'"),
    "repeated option": ('alice namespaces="a",namespaces="b" {key}', "line 1: option namespaces given twice"),
    "bad time": ('alice valid-before="2020-01-01" {key}', "line 1: valid-before='2020-01-01' is not a time"),
    "impossible date": ('alice valid-after="20230230" {key}', "valid-after='20230230' is not a time"),
    "reversed window": ('alice valid-after="20240101",valid-before="20230101" {key}', "is not after valid-after"),
    # OpenSSH skips a line whose option value is unquoted: a key it would not trust never counts here
    "unquoted time": ("alice valid-before=20200101 {key}", 'line 1: valid-before=20200101 is not quoted'),
    "unquoted namespaces": ("alice namespaces=backfill-plan {key}", "line 1: namespaces=backfill-plan is not quoted"),
    "unbalanced quote": ('alice namespaces="git {key}', "line 1: unbalanced double quote"),
    "no key": ("alice", "line 1: expected a supported key type"),
    "dsa key": ("alice ssh-dss AAAAB3NzaC1kc3M=", "line 1: expected a supported key type"),
    "dsa key with options": ('alice namespaces="git" ssh-dss AAAAB3NzaC1kc3M=', "found 'ssh-dss'"),
    "certificate": ("alice ssh-ed25519-cert-v01@openssh.com AAAA", "found 'ssh-ed25519-cert-v01@open"),
    "bad base64": ("alice ssh-ed25519 AAAA*", "line 1: 'ssh-ed25519 AAAA*' is not an SSH public key line"),
    "type mismatch": ("alice ssh-rsa {blob}", "line 1: public key line says 'ssh-rsa'"),
    "invisible principal": ("ali\u200bce {key}", "line 1: principal 'ali\\u200bce' contains an invisible"),
    "no-break space inside": ("ali\u00a0ce {key}", "principal 'ali\\u00a0ce' contains whitespace U+00A0"),
    "empty principal": ("alice,,bob {key}", "line 1: principal '' is empty"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_malformed_allowed_signers_lines_are_refused(keys, case):
    template, expected = BAD_FILES[case]
    line = pub_line(keys["ed25519"])
    text = template.format(key=line, blob=line.split()[1])
    with pytest.raises(AllowedSignersError) as excinfo:
        AllowedSigners.parse(text)
    assert expected in one_line_error(excinfo)


def test_missing_and_oversized_files(tmp_path):
    with pytest.raises(AllowedSignersError) as excinfo:
        AllowedSigners.load(tmp_path / "allowed_signers")
    text = one_line_error(excinfo)
    assert "does not exist" in text and "set BACKFILL_ALLOWED_SIGNERS" in text
    assert "`alice ssh-ed25519 AAAA...`" in text
    big = tmp_path / "big"
    big.write_text("# padding\n" * 110_000)
    with pytest.raises(AllowedSignersError, match="larger than 1048576 bytes"):
        AllowedSigners.load(big)


def test_load_canonicalises_principals_and_records_the_file_hash(tmp_path, keys):
    text = (f"# team\n\nALICE,Carol@Example.com {pub_line(keys['ed25519'])} alice laptop\n"
            f'bob namespaces="backfill-plan" {pub_line(keys["bob"])}\n')
    path = tmp_path / "allowed_signers"
    path.write_text(text)
    signers = AllowedSigners.load(path)
    assert signers.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert signers.source == str(path)
    assert [e.line for e in signers.entries] == [3, 4]
    assert signers.entries[0].comment == "alice laptop"
    assert signers.principals_for(pub_line(keys["ed25519"])) == ["alice", "carol@example.com"]
    assert signers.principals_for(keys["bob"].with_suffix(".pub").read_text()) == ["bob"]
    assert signers.principals_for(pub_line(keys["mallory"])) == []
    armored = ssh_sign(keys["ed25519"], MESSAGE)
    assert signers.verify_approval("Carol@EXAMPLE.com", MESSAGE, armored)
    assert signers.verify_approval("\uff41\uff4c\uff49\uff43\uff45", MESSAGE, armored)  # full-width alice


# --- principals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, canonical", [
    ("alice", "alice"),
    ("ALICE", "alice"),
    ("  Alice\t", "alice"),
    ("\uff41\uff4c\uff49\uff43\uff45", "alice"),
    ("\U0001d400lice", "alice"),  # MATHEMATICAL BOLD CAPITAL A: NFKC gives "A", casefold "a"
    ("Olivia.Smith+ops@example.com", "olivia.smith+ops@example.com"),
    ("a", "a"),
])
def test_canonical_principal_folds_lookalike_spellings(raw, canonical):
    assert canonical_principal(raw) == canonical


@pytest.mark.parametrize("raw, problem", [
    ("alice\u200b", "contains an invisible format character U+200B (ZERO WIDTH SPACE)"),
    ("\ufeffalice", "contains an invisible format character U+FEFF (ZERO WIDTH NO-BREAK SPACE)"),
    ("al\u200dice", "U+200D (ZERO WIDTH JOINER)"),
    ("\u043elivia", "contains a non-ASCII character U+043E (CYRILLIC SMALL LETTER O)"),
    ("alice bob", "contains whitespace U+0020 (SPACE) inside it"),
    ("alice\u00a0bob", "whitespace"),
    ("alice\x00", "control"),
    ("", "is empty"),
    ("   ", "is empty"),
    ("-alice", "is not a principal"),
    ("alice.", "is not a principal"),
    ("alice/bob", "is not a principal"),
    ("a" * 65, "is not a principal"),
    ("a" * 300, "300 characters long"),
])
def test_canonical_principal_refuses(raw, problem):
    with pytest.raises(PrincipalError) as excinfo:
        canonical_principal(raw, "approver")
    text = one_line_error(excinfo)
    assert text.startswith("approver ") and problem in text
    assert text.endswith(": write the name in plain ASCII letters, digits and . _ @ + -")


def test_soft_hyphen_message_names_the_code_point():
    with pytest.raises(PrincipalError) as excinfo:
        canonical_principal("oli\u00advia", "owner")
    assert str(excinfo.value) == (
        "owner 'oli\\u00advia' contains an invisible format character U+00AD (SOFT HYPHEN): "
        "write the name in plain ASCII letters, digits and . _ @ + -"
    )


def test_non_string_principal_is_refused():
    with pytest.raises(PrincipalError, match="is not a string"):
        canonical_principal(b"alice")  # type: ignore[arg-type]


def test_same_principal():
    assert same_principal("alice", "ALICE")
    assert same_principal("\uff41\uff4c\uff49\uff43\uff45", "alice")
    assert not same_principal("alice", "bob")
    with pytest.raises(PrincipalError):
        same_principal("alice", "alice\u200b")
    with pytest.raises(PrincipalError):
        same_principal("\u043elivia", "olivia")


# characters Python's str.split() splits on and OpenSSH does not (it splits a line's fields on space
# and tab): a line holding one inside its key is no key to OpenSSH ("invalid key")
HIDDEN_SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u00a0", "\u3000"]


@pytest.mark.parametrize("sep", HIDDEN_SEPARATORS, ids=[f"U+{ord(c):04X}" for c in HIDDEN_SEPARATORS])
def test_a_line_openssh_reads_as_no_key_is_refused(tmp_path: Path, sep: str) -> None:
    """Found by an attack: `alice KEY_A<CR>bob KEY_B` shows on a terminal (`cat`, `git diff`) as bob's
    line; OpenSSH trusts no one for it, but this reader split the key field on every Unicode space
    and listed key A for alice, whose signature then counted. A line holding a control character or
    a space other than space and tab is refused in one line, as OpenSSH refuses it."""
    key_a, key_b = keygen(tmp_path, "a", KEY_TYPES["ed25519"]), keygen(tmp_path, "b", KEY_TYPES["ed25519"])
    text = f"alice {pub_line(key_a)}{sep}bob {pub_line(key_b)}\n"
    signature = ssh_sign(key_a, MESSAGE)
    assert ssh_verify(tmp_path, text, "alice", signature, MESSAGE).returncode != 0  # OpenSSH: no key here
    with pytest.raises(AllowedSignersError, match="line 1"):
        AllowedSigners.parse(text)


@pytest.mark.parametrize("template", ["alice\u00a0 {key}", "\x0calice {key}", "alice\u2028 {key}",
                                      "alice\x1c {key}", "alice {key} laptop\u202e"],
                         ids=["nbsp after the principal", "form feed before it", "line separator after it",
                              "file separator after it", "direction override in the comment"])
def test_a_hidden_character_beside_the_principal_or_in_the_comment_is_refused(tmp_path: Path,
                                                                              template: str) -> None:
    """Found by a review: the principal's own check strips what surrounds it (NFKC, then strip), so
    `alice<NBSP> KEY` listed the key for alice, which OpenSSH does not; and a comment may hold
    nothing that changes how the line shows."""
    key = keygen(tmp_path, "a", KEY_TYPES["ed25519"])
    text = template.format(key=pub_line(key)) + "\n"
    if "laptop" not in template:  # OpenSSH: no principal alice here
        assert ssh_verify(tmp_path, text, "alice", ssh_sign(key, MESSAGE), MESSAGE).returncode != 0
    with pytest.raises(AllowedSignersError, match="line 1 holds the character"):
        AllowedSigners.parse(text)


@pytest.mark.parametrize("comment", ["laptop\u200dx", "\u3000\u540d\u524d", "no\u00a0break"],
                         ids=["zero-width joiner", "ideographic space", "no-break space"])
def test_a_comment_of_any_script_still_reads(tmp_path: Path, comment: str) -> None:
    """Found by a review: the first refusal took every space and invisible character in a comment
    for a hidden field, and refused a file OpenSSH verifies signatures under."""
    key = keygen(tmp_path, "a", KEY_TYPES["ed25519"])
    text = f"alice {pub_line(key)} {comment}\n"
    assert ssh_verify(tmp_path, text, "alice", ssh_sign(key, MESSAGE), MESSAGE).returncode == 0
    assert AllowedSigners.parse(text).principals == {"alice"}


def test_a_crlf_file_and_a_comment_of_another_script_still_read(tmp_path: Path) -> None:
    """What the refusal above leaves alone: a file saved with CRLF line ends, and a key's comment in
    another script (`ssh-keygen -C josé`), both of which OpenSSH reads."""
    key = keygen(tmp_path, "a", KEY_TYPES["ed25519"])
    text = f"# approvers\r\nalice {pub_line(key)} josé@laptop\r\n"
    signature = ssh_sign(key, MESSAGE)
    assert ssh_verify(tmp_path, text, "alice", signature, MESSAGE).returncode == 0
    assert AllowedSigners.parse(text).principals == {"alice"}


# --- key identity as OpenSSH computes it: differential against ssh-keygen -------------------------------

def _fields(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = struct.unpack(">I", data[i:i + 4])[0]
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


def _with_key(signature: str, key_blob: bytes, tail: bytes = b"") -> str:
    """The signature with another encoding of its public key (and bytes after the SSHSIG blob)."""
    raw = dearmor(signature)
    parts = _fields(raw[10:])
    parts[0] = key_blob
    return armor(raw[:10] + b"".join(s(p) for p in parts) + tail)


def _mutations(kind: str, blob: bytes) -> dict[str, bytes]:
    parts = _fields(blob)
    found = {"as signed": blob, "trailing data in the key": blob + s(b"x")}
    if kind == "rsa":
        found["a spare zero in the modulus"] = s(parts[0]) + s(parts[1]) + s(b"\0" + parts[2])
        found["a spare zero in the exponent"] = s(parts[0]) + s(b"\0" + parts[1]) + s(parts[2])
        found["two spare zeros in the modulus"] = s(parts[0]) + s(parts[1]) + s(b"\0\0" + parts[2])
    if kind.startswith("ecdsa"):
        point = parts[2]
        half = (len(point) - 1) // 2
        found["a compressed point"] = s(parts[0]) + s(parts[1]) + s(bytes([2 + (point[-1] & 1)]) + point[1:1 + half])
    return found


@pytest.mark.parametrize("key_type", ["rsa", "ecdsa256", "ecdsa384", "ed25519"])
def test_key_identity_is_openssh_s_under_every_encoding(tmp_path, keys, key_type):
    """Whatever encoding of a key a signature carries, we accept exactly what `ssh-keygen -Y verify`
    and `-Y find-principals` accept, and name the key by the fingerprint `ssh-keygen -l` prints, so
    one key under two names, or re-encoded, counts once."""
    key = keys[key_type]
    line = pub_line(key)
    blob = base64.b64decode(line.split()[1])
    signed = ssh_sign(key, MESSAGE)
    expected_fp = ssh_fingerprint(key)
    allowed = f"alice {line}\nalias {line}\n"
    signers = AllowedSigners.parse(allowed)
    (tmp_path / "allowed_signers").write_text(allowed)
    seen = {}
    kind = "ecdsa" if key_type.startswith("ecdsa") else key_type
    for label, mutated in _mutations(kind, blob).items():
        for tail_label, tail in (("", b""), (" and trailing bytes after the signature", b"\0")):
            sig = _with_key(signed, mutated, tail)
            (tmp_path / "m.sig").write_text(sig)
            theirs = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(tmp_path / "allowed_signers"), "-I",
                                     "alias", "-n", NAMESPACE, "-s", str(tmp_path / "m.sig")], input=MESSAGE,
                                    capture_output=True, timeout=60).returncode == 0
            found = subprocess.run(["ssh-keygen", "-Y", "find-principals", "-f", str(tmp_path / "allowed_signers"),
                                    "-s", str(tmp_path / "m.sig")], capture_output=True, text=True, timeout=60)
            try:
                ours_sig = signers.verify_approval("alias", MESSAGE, sig)
                ours = True
            except SignatureError:
                ours = False
            seen[label + tail_label] = (theirs, ours)
            assert ours == theirs, (label + tail_label, theirs, ours)
            if ours:
                assert ours_sig.fingerprint == expected_fp, label
                # find-principals names the first line listing the key; we list every name it has
                assert found.stdout.split() and set(found.stdout.split()) <= set(
                    signers.principals_for(ours_sig.public_key))
    assert seen["as signed"] == (True, True)
