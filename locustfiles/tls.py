"""TLS and credentials for reaching a real service: one client context for every protocol's
``https://``, ``wss://`` and ``grpcs://`` targets (verifying by default, against ``--tls-ca``
where given), and the ``${VAR}`` references a credential's value reads from the environment."""
from __future__ import annotations

import os
import re
import ssl

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class CredentialError(ValueError):
    """A credential or certificate option tts-knee cannot use; the message names it."""


def client_context(ca: str = "", insecure: bool = False, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    """The client context: the system's CAs, or ``ca``'s (a PEM file); none verified with
    ``insecure``; ``alpn`` the protocols offered (gRPC: h2). Raises :class:`CredentialError` for a
    CA file that cannot be read or holds no certificate."""
    try:
        ctx = ssl.create_default_context(cafile=ca or None)
    except FileNotFoundError:
        raise CredentialError(f"--tls-ca {ca}: no such file") from None
    except (ssl.SSLError, OSError, ValueError) as e:
        raise CredentialError(f"--tls-ca {ca}: not a PEM file of CA certificates ({_reason(e)})") from None
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def expand(value: str, option: str) -> str:
    """``value`` with each ``${VAR}`` replaced by the environment's VAR; an unset one raises
    :class:`CredentialError` naming ``option`` and the variable (never the value)."""
    def one(m: re.Match) -> str:
        got = os.environ.get(m.group(1))
        if got is None:
            raise CredentialError(f"{option} reads ${{{m.group(1)}}}, which is not set in the environment")
        return got
    return _VAR.sub(one, value)


def pairs(items, option: str, sep: str) -> tuple[tuple[str, str], ...]:
    """``NAME<sep>VALUE`` items (``--header 'NAME: VALUE'``, ``--grpc-metadata KEY=VALUE``) as
    (name, expanded value) pairs; raises :class:`CredentialError` for one without a name."""
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, (list, tuple)):
        raise CredentialError(f"{option} takes a list of items, got {type(items).__name__}")
    out = []
    for item in items:
        name, found, value = str(item).partition(sep)
        name = name.strip()
        if not found or not name or any(c.isspace() for c in name):
            shape = "'NAME: VALUE'" if sep == ":" else "KEY=VALUE"
            raise CredentialError(f"{option} takes {shape}, got one without a name: {name[:40]!r}")
        out.append((name.lower() if sep == "=" else name, expand(value.strip(), f"{option} {name}")))
    return tuple(out)


def verify_hint(error: BaseException, insecure: bool) -> str:
    """A failed handshake in one clause, with what to pass for it."""
    text = _reason(error)
    if isinstance(error, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        return (f"its TLS certificate does not verify ({getattr(error, 'verify_message', None) or text}); "
                f"pass --tls-ca FILE for a private CA" + ("" if insecure else ", or --tls-insecure to skip the check"))
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text or "UNEXPECTED_EOF" in text:
        return f"the TLS handshake failed ({text}): is the target plaintext (http://, ws://, grpc://)?"
    return f"the TLS handshake failed ({text})"


def _reason(e: BaseException) -> str:
    return " ".join(str(getattr(e, "reason", None) or e or type(e).__name__).split())[:160]
