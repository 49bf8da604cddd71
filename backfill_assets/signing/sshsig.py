"""SSHSIG signatures, byte-compatible with ``ssh-keygen -Y sign`` / ``-Y verify`` (OpenSSH PROTOCOL.sshsig).

Blob:   "SSHSIG" u32(1) string(publickey) string(namespace) string(reserved) string(hash_alg)
        string(signature)
Signed: "SSHSIG" string(namespace) string("") string(hash_alg) string(H(message))

Parsing is strict and bounded (one SignatureError for every malformed input) because signatures
arrive in plan files anyone can edit; the cryptography itself is ``cryptography``'s.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from backfill_assets.bounded import read_bounded
from backfill_assets.errors import SignatureError

NAMESPACE = "backfill-plan"
MAX_SIGNATURE_TEXT = 64 * 1024
HASH_ALGS = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}
ECDSA_HASHES: dict[str, type[hashes.SHA256 | hashes.SHA384 | hashes.SHA512]] = {
                "ecdsa-sha2-nistp256": hashes.SHA256, "ecdsa-sha2-nistp384": hashes.SHA384,
                "ecdsa-sha2-nistp521": hashes.SHA512}
KEY_TYPES = ("ssh-ed25519", "ssh-rsa", *ECDSA_HASHES)
SK_KEY_TYPES = ("sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")
MIN_RSA_BITS, MAX_RSA_BITS = 2048, 16384  # the upper bound is OpenSSH's; it bounds hostile keys' cost
PublicKey = ed25519.Ed25519PublicKey | rsa.RSAPublicKey | ec.EllipticCurvePublicKey
PrivateKey = ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
_MAGIC = b"SSHSIG"
_BEGIN, _END = "-----BEGIN SSH SIGNATURE-----", "-----END SSH SIGNATURE-----"
_RSA_SIG_HASHES = {"rsa-sha2-256": hashes.SHA256, "rsa-sha2-512": hashes.SHA512}
_OPENSSH = (serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
_SIGN_FIX = "sign with `ssh-keygen -Y sign -f KEY -n backfill-plan` and pass the signature file"
_SIG_FIX = "paste the whole `ssh-keygen -Y sign` output (or its base64 on one line) unchanged"


@dataclass(frozen=True)
class Signature:
    """A parsed SSHSIG blob; ``parse`` checked its structure, ``verify`` its cryptography too."""

    public_key: bytes  # the signing key's SSH wire blob: canonical once `verify` returned it
    namespace: str
    hash_alg: str
    signature: bytes  # the SSH signature blob: string(sig_alg) string(sig_bytes)
    key_type: str
    sig_alg: str
    raw: bytes  # the whole SSHSIG blob

    @property
    def public_key_line(self) -> str:
        return f"{self.key_type} {base64.b64encode(self.public_key).decode()}"

    @property
    def fingerprint(self) -> str:
        """OpenSSH's fingerprint of the key; of its canonical blob once `verify` returned it, so two
        encodings of one key (an RSA modulus with a spare leading zero) give one fingerprint."""
        return fingerprint(self.public_key)

    @property
    def one_line(self) -> str:
        return base64.b64encode(self.raw).decode()


class _Reader:
    """SSH wire-format reader (RFC 4251); every overrun is a SignatureError, never an IndexError."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise SignatureError(f"{self.what} is truncated", fix=_SIG_FIX)
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def string(self) -> bytes:
        return self.take(self.u32())

    def text(self, field: str) -> str:
        value = self.string()
        if not value or not value.isascii() or not value.decode().isprintable():
            raise SignatureError(f"{self.what} has a bad {field} {value[:40]!r}", fix=_SIG_FIX)
        return value.decode()

    def mpint(self) -> int:
        value = self.string()
        if value[:1] >= b"\x80":
            raise SignatureError(f"{self.what} has a negative integer", fix=_SIG_FIX)
        return int.from_bytes(value, "big")

    def end(self) -> None:
        if self.pos != len(self.data):
            raise SignatureError(f"{self.what} has {len(self.data) - self.pos} trailing bytes", fix=_SIG_FIX)


def _string(value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return struct.pack(">I", len(data)) + data


def _brief(exc: Exception) -> str:
    """A third-party exception's text, made safe for a one-line error."""
    return " ".join(str(exc).split())[:120] or type(exc).__name__


def _mpint(value: int) -> bytes:
    # One extra byte when the top bit is set: SSH mpints are two's complement.
    return _string(value.to_bytes((value.bit_length() + 8) // 8, "big") if value else b"")


def fingerprint(public_key_blob: bytes) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a key blob, as ``ssh-keygen -lf`` prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(public_key_blob).digest()).decode().rstrip("=")


def armor(blob: bytes) -> str:
    """The ``ssh-keygen -Y sign`` text for ``blob``: header, 70-column base64 lines, footer."""
    b64 = base64.b64encode(blob).decode()
    return "\n".join([_BEGIN, *(b64[i : i + 70] for i in range(0, len(b64), 70)), _END]) + "\n"


def dearmor(text: str | bytes) -> bytes:
    """The blob inside an armored signature, or inside bare base64 (whitespace ignored)."""
    if not isinstance(text, str | bytes):
        raise SignatureError(f"signature is a {type(text).__name__}, not text", fix=_SIG_FIX)
    if len(text) > MAX_SIGNATURE_TEXT:
        raise SignatureError(f"signature is {len(text)} long (at most {MAX_SIGNATURE_TEXT})", fix=_SIG_FIX)
    if isinstance(text, bytes):
        text = text.decode("ascii", errors="replace")  # a replaced byte then fails as bad base64
    body = text.strip()
    if body.startswith("-----"):
        if not body.startswith(_BEGIN + "\n") or not body.endswith("\n" + _END):
            raise SignatureError("signature armor is broken (header or footer missing)", fix=_SIG_FIX)
        body = body[len(_BEGIN) : -len(_END)]
    try:
        blob = base64.b64decode(re.sub(r"\s+", "", body), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("signature is not valid base64", fix=_SIG_FIX) from None
    if not blob:
        raise SignatureError("signature is empty", fix=_SIG_FIX)
    return blob


def one_line(armored: str) -> str:
    """The bare base64 of a structurally valid signature: the form stored on one line of YAML."""
    return parse(armored).one_line


def parse(armored_or_base64: str | bytes) -> Signature:
    """Parse an SSHSIG signature's structure; SignatureError if it is malformed in any way."""
    raw = dearmor(armored_or_base64)
    r = _Reader(raw, "signature")
    if r.take(6) != _MAGIC:
        raise SignatureError("signature does not start with SSHSIG", fix=_SIG_FIX)
    if (version := r.u32()) != 1:
        raise SignatureError(f"signature has SSHSIG version {version}, expected 1", fix=_SIG_FIX)
    public_key, namespace = r.string(), r.text("namespace")
    r.string()  # reserved: PROTOCOL.sshsig says verifiers ignore it
    hash_alg, signature = r.text("hash algorithm"), r.string()
    r.end()
    key_type = _Reader(public_key, "signature's public key").text("key type")
    sig_reader = _Reader(signature, "signature's signature field")
    sig_alg = sig_reader.text("signature algorithm")
    sig_reader.string()
    if key_type not in SK_KEY_TYPES:  # security-key signatures carry flags and a counter after it
        sig_reader.end()
    return Signature(public_key, namespace, hash_alg, signature, key_type, sig_alg, raw)


def key_type_of(blob: bytes) -> str:
    """The key type a public key blob starts with (``ssh-ed25519``, ...); SignatureError if none."""
    return _Reader(blob, "public key").text("key type")


def load_public_key(blob: bytes) -> PublicKey:
    """The ``cryptography`` key for an SSH public key blob of a supported type."""
    key_type = key_type_of(blob)
    if key_type in SK_KEY_TYPES:
        raise SignatureError(f"key type {key_type} (a security key) is not supported",
                             fix="sign with an ed25519, ecdsa or RSA key that is not on a security key")
    if key_type not in KEY_TYPES:
        raise SignatureError(f"key type {key_type!r} is not supported",
                             fix=f"use one of {', '.join(KEY_TYPES)} (certificates are not supported)")
    try:
        key = serialization.load_ssh_public_key(f"{key_type} {base64.b64encode(blob).decode()}".encode())
    except Exception as exc:  # cryptography raises ValueError, NotImplementedError, ... on bad points
        raise SignatureError(f"{key_type} public key is malformed ({_brief(exc)})", fix=_SIG_FIX) from None
    if not isinstance(key, PublicKey):
        raise SignatureError(f"key type {key_type!r} is not supported", fix=_SIG_FIX)
    if isinstance(key, rsa.RSAPublicKey) and not MIN_RSA_BITS <= key.key_size <= MAX_RSA_BITS:
        raise SignatureError(f"RSA key has {key.key_size} bits ({MIN_RSA_BITS} to {MAX_RSA_BITS} accepted)",
                             fix="use an ed25519 key (`ssh-keygen -t ed25519`)")
    return key


def canonical_blob(blob: bytes) -> bytes:
    """The key blob as OpenSSH re-serialises it (what `ssh-keygen -l` fingerprints and what it
    compares): integers without spare leading zeros. Every comparison of keys uses this form."""
    key = load_public_key(blob)
    return base64.b64decode(key.public_bytes(*_OPENSSH).split()[1])


def _signed_data(message: bytes, namespace: str, hash_alg: str) -> bytes:
    digest = HASH_ALGS[hash_alg](message).digest()
    return _MAGIC + _string(namespace) + _string(b"") + _string(hash_alg) + _string(digest)


def sign(message: bytes, private_key_path: str | Path, namespace: str = NAMESPACE,
         hash_alg: str = "sha512") -> str:
    """Sign ``message`` as ``ssh-keygen -Y sign -n NAMESPACE`` would; returns the armored signature."""
    if not isinstance(message, bytes):
        raise SignatureError(f"message is a {type(message).__name__}, not bytes", fix=_SIGN_FIX)
    if hash_alg not in HASH_ALGS or not namespace:
        raise SignatureError(f"cannot sign with hash {hash_alg!r} in namespace {namespace!r}",
                             fix="use hash sha512 or sha256 and a non-empty namespace")
    key = _load_private_key(Path(private_key_path))
    data = _signed_data(message, namespace, hash_alg)
    key_type, key_b64 = key.public_key().public_bytes(*_OPENSSH).decode().split()[:2]
    if isinstance(key, ed25519.Ed25519PrivateKey):
        sig = _string(key_type) + _string(key.sign(data))
    elif isinstance(key, rsa.RSAPrivateKey):  # never SHA-1 "ssh-rsa": OpenSSH refuses it for SSHSIG
        sig = _string("rsa-sha2-512") + _string(key.sign(data, padding.PKCS1v15(), hashes.SHA512()))
    else:
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(ECDSA_HASHES[key_type]())))
        sig = _string(key_type) + _string(_mpint(r) + _mpint(s))
    fields: list[bytes | str] = [base64.b64decode(key_b64), namespace, b"", hash_alg, sig]
    return armor(_MAGIC + struct.pack(">I", 1) + b"".join(_string(f) for f in fields))


# Keys this process loaded, by their file's bytes: loading an RSA key checks it (~40 ms), and one
# process (the demo, `plan approve --sign` twice) may sign with the same key again. Same bytes, same key.
_loaded: dict[bytes, PrivateKey] = {}
_LOADED_KEPT = 16


def _load_private_key(path: Path) -> PrivateKey:
    try:
        data = read_bounded(path, 64 * 1024, "private key", _SIGN_FIX)  # a regular file, bounded
    except OSError as exc:
        raise SignatureError(f"cannot read private key {path} ({exc.strerror})", fix=_SIGN_FIX) from None
    digest = hashlib.sha256(data).digest()
    if digest in _loaded:
        return _loaded[digest]
    key = _checked_private_key(path, data)
    if len(_loaded) >= _LOADED_KEPT:
        _loaded.pop(next(iter(_loaded)))
    _loaded[digest] = key
    return key


def _checked_private_key(path: Path, data: bytes) -> PrivateKey:
    try:
        key = serialization.load_ssh_private_key(data, password=None)
    except TypeError:  # cryptography's way of saying "this key needs a passphrase"
        raise SignatureError(f"private key {path} is encrypted", fix=_SIGN_FIX) from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SignatureError(f"{path} is not a usable OpenSSH private key ({_brief(exc)})",
                             fix=_SIGN_FIX) from None
    if not isinstance(key, PrivateKey):
        raise SignatureError(f"{path} holds a {type(key).__name__}, which cannot sign here", fix=_SIGN_FIX)
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size < MIN_RSA_BITS:  # verify would refuse it
        raise SignatureError(f"{path} is a {key.key_size}-bit RSA key (minimum {MIN_RSA_BITS})",
                             fix="use an ed25519 key (`ssh-keygen -t ed25519`)")
    return key


def verify(message: bytes, signature: str | bytes, namespace: str = NAMESPACE) -> Signature:
    """Parse ``signature`` and check that its embedded key signed ``message`` in ``namespace``.

    This proves only that *some* key signed; AllowedSigners.verify_approval decides whose key it is.
    The returned signature carries the key's canonical blob (``canonical_blob``), never the bytes
    as written in the signature.
    """
    sig = parse(signature)
    if not isinstance(message, bytes):
        raise SignatureError(f"message is a {type(message).__name__}, not bytes", fix=_SIG_FIX)
    if sig.namespace != namespace:
        raise SignatureError(f"signature is for namespace {sig.namespace!r}, expected {namespace!r}",
                             fix=f"sign again with `-n {namespace}`")
    if sig.hash_alg not in HASH_ALGS:
        raise SignatureError(f"signature uses hash {sig.hash_alg!r}, expected sha256 or sha512",
                             fix="sign again with ssh-keygen (it uses sha512)")
    key = load_public_key(sig.public_key)
    inner = _Reader(sig.signature, "signature")
    inner.string()
    try:
        _check(key, sig, inner.string(), _signed_data(message, namespace, sig.hash_alg))
    except SignatureError:
        raise
    except Exception:  # InvalidSignature, or cryptography refusing a hostile value outright
        raise SignatureError(f"signature does not verify for this message (key {sig.fingerprint})",
                             fix="sign exactly this plan's sha256 again, with your approving key") from None
    return replace(sig, public_key=base64.b64decode(key.public_bytes(*_OPENSSH).split()[1]))


_VERIFIED: dict[tuple[bytes, str, str], Signature | SignatureError] = {}


def verify_cached(message: bytes, signature: str | bytes, namespace: str = NAMESPACE) -> Signature:
    """`verify`, remembered per process: decisions re-verify every stored signature each time they
    read it, and a signature's verdict on a message never changes."""
    text = signature if isinstance(signature, str) else signature.decode("ascii", errors="replace")
    key = (message, text, namespace)
    found = _VERIFIED.get(key)
    if found is None:
        try:
            found = verify(message, text, namespace)
        except SignatureError as exc:
            found = exc
        if len(_VERIFIED) > 4096:
            _VERIFIED.clear()
        _VERIFIED[key] = found
    if isinstance(found, SignatureError):
        raise SignatureError(found.message, fix=found.fix)
    return found


def _check(key: PublicKey, sig: Signature, sig_bytes: bytes, data: bytes) -> None:
    """Raise InvalidSignature (SignatureError for a refused algorithm) unless the signature holds."""
    if isinstance(key, ed25519.Ed25519PublicKey):
        if sig.sig_alg != "ssh-ed25519" or len(sig_bytes) != 64:
            raise InvalidSignature
        key.verify(sig_bytes, data)
    elif isinstance(key, rsa.RSAPublicKey):
        if sig.sig_alg not in _RSA_SIG_HASHES:
            raise SignatureError(f"RSA signature uses {sig.sig_alg!r} (SHA-1 or unknown), not rsa-sha2-*",
                                 fix="sign again with a current ssh-keygen (it uses rsa-sha2-512)")
        size = (key.key_size + 7) // 8
        if len(sig_bytes) > size:
            raise InvalidSignature
        # OpenSSH accepts signatures whose leading zero bytes were dropped; OpenSSL wants full length.
        key.verify(sig_bytes.rjust(size, b"\0"), data, padding.PKCS1v15(), _RSA_SIG_HASHES[sig.sig_alg]())
    else:
        if sig.sig_alg != sig.key_type:
            raise InvalidSignature
        r = _Reader(sig_bytes, "ECDSA signature")
        rs = (r.mpint(), r.mpint())
        r.end()
        if min(rs) <= 0:
            raise InvalidSignature
        key.verify(encode_dss_signature(*rs), data, ec.ECDSA(ECDSA_HASHES[sig.key_type]()))
