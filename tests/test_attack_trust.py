"""Attacks on trust (round `trust`): an approver with one key and an operator with the CLI but no
approver key, against who may approve, what a signature binds and how signatures are counted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from backfill_assets.errors import SignatureError
from backfill_assets.signing.allowed_signers import AllowedSigners
from backfill_assets.signing.sshsig import NAMESPACE

MESSAGE = b"backfill-assets plan approval\n"


def _key(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)],
                   check=True, capture_output=True, timeout=60)
    return path


def _ssh_verify(tmp_path: Path, allowed: str, signature: str) -> int:
    (tmp_path / "allowed_signers").write_text(allowed)
    (tmp_path / "msg.sig").write_text(signature)
    return subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(tmp_path / "allowed_signers"), "-I", "alice",
                           "-n", NAMESPACE, "-s", str(tmp_path / "msg.sig")], input=MESSAGE,
                          capture_output=True, timeout=60).returncode


@pytest.mark.parametrize("option", ['valid-after="19700101"', 'valid-after="19691231"', 'valid-after="16000101"',
                                    'valid-before="19700101000000Z"'])
def test_a_time_at_or_before_the_epoch_is_a_line_openssh_skips_and_never_lets_its_key_count(tmp_path, option):
    """OpenSSH refuses a `valid-after` or `valid-before` at or before 1970-01-01 ("invalid
    valid-after time") and skips the line: the key is no signer's for `ssh-keygen -Y verify` (nor
    git). Read here as a time long past, `valid-after="19691231"` let the key count for alice."""
    key = _key(tmp_path, "alice")
    line = f'alice {option} {" ".join(key.with_suffix(".pub").read_text().split()[:2])}\n'
    signature = subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", NAMESPACE], input=MESSAGE,
                               capture_output=True, check=True, timeout=60).stdout.decode()
    assert _ssh_verify(tmp_path, line, signature) != 0  # OpenSSH: no key for alice
    signers = AllowedSigners.parse(line)  # a root pinned with such a line still reads
    with pytest.raises(SignatureError) as excinfo:
        signers.verify_approval("alice", MESSAGE, signature)
    said = str(excinfo.value)
    assert "\n" not in said and "OpenSSH skips this line" in said and "1970-01-02" in said, said
    # OpenSSH reads on past the line it skips, and so is a second line for the key read here
    both = line + f'alice namespaces="backfill-plan" {line.split(" ", 2)[2]}'
    assert _ssh_verify(tmp_path, both, signature) == 0
    assert AllowedSigners.parse(both).verify_approval("alice", MESSAGE, signature)
