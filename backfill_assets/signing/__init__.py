"""SSH-signature approvals: canonical principals, SSHSIG signatures and OpenSSH allowed_signers files.

An approval is an ``ssh-keygen -Y sign -n backfill-plan`` signature over a plan's sha256 hex string,
checked against a team's allowed_signers file (the one git's gpg.ssh.allowedSignersFile uses).
"""

from __future__ import annotations

from backfill_assets.signing.allowed_signers import AllowedSigners, SignerEntry, key_blob
from backfill_assets.signing.principals import canonical_principal, same_principal
from backfill_assets.signing.sshsig import (
    NAMESPACE,
    Signature,
    armor,
    dearmor,
    fingerprint,
    one_line,
    parse,
    sign,
    verify,
)

__all__ = [
    "NAMESPACE",
    "AllowedSigners",
    "Signature",
    "SignerEntry",
    "armor",
    "canonical_principal",
    "dearmor",
    "fingerprint",
    "key_blob",
    "one_line",
    "parse",
    "same_principal",
    "sign",
    "verify",
]
