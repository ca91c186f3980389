"""TLS and credentials for reaching a real service: one client context for every protocol's
``https://``, ``wss://`` and ``grpcs://`` targets (verifying by default, against ``--tls-ca``
where given), and the ``${VAR}`` references a credential's value reads from the environment."""

from __future__ import annotations

import os
import re
import ssl
import time

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class CredentialError(ValueError):
    """A credential or certificate option tts-knee cannot use; the message names it."""


def client_context(
    ca: str = "", insecure: bool = False, alpn: tuple[str, ...] = (), cert: str = "", key: str = ""
) -> ssl.SSLContext:
    """The client context: the system's CAs, or ``ca``'s (a PEM file); none verified with
    ``insecure``; ``alpn`` the protocols offered (gRPC: h2); ``cert`` (and ``key``, where it is a
    file of its own) the client certificate a server asking for one is shown. Raises
    :class:`CredentialError` for a CA file that cannot be read or holds no certificate, and for a
    client certificate or key that cannot be read, is not PEM, or do not belong together."""
    try:
        ctx = ssl.create_default_context(cafile=ca or None)
    except FileNotFoundError:
        raise CredentialError(f"--tls-ca {ca}: no such file") from None
    except (ssl.SSLError, OSError, ValueError) as error:
        raise CredentialError(f"--tls-ca {ca}: not a PEM file of CA certificates ({_reason(error)})") from None
    if key and not cert:
        raise CredentialError("--tls-client-key is the key of --tls-client-cert: give the certificate too")
    if cert:
        try:
            ctx.load_cert_chain(cert, key or None)
        except FileNotFoundError as error:
            which = "--tls-client-key" if key and error.filename == key else "--tls-client-cert"
            raise CredentialError(
                f"{which} {error.filename or (key if which.endswith('key') else cert)}: no such file"
            ) from None
        except (ssl.SSLError, OSError, ValueError) as error:
            text = _reason(error)
            why = (
                "the key does not belong to the certificate"
                if "KEY_VALUES_MISMATCH" in text or "mismatch" in text
                else "no private key in it (give --tls-client-key)"
                if not key and "PEM lib" in text
                else f"not a PEM certificate{' and key' if key else ' with its key'} ({text})"
            )
            raise CredentialError(f"--tls-client-cert {cert}: {why}") from None
        _check_dates(cert)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def _check_dates(cert: str) -> None:
    """A client certificate outside its validity says so before the run (a server refusing it
    may only close the connection). Read with the ssl module's own decoder; where that is not
    there, the server's answer is what tells."""
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    try:
        info = decode(cert) if decode else None
        if info is None:
            return
        after, before = (
            (ssl.cert_time_to_seconds(info[field]) for field in ("notAfter", "notBefore")) if info else (None, None)
        )
    except (ssl.SSLError, OSError, ValueError, KeyError, TypeError):
        return
    now = time.time()
    if after is not None and after < now:
        raise CredentialError(f"--tls-client-cert {cert} expired on {info['notAfter']}: renew it")
    if before is not None and before > now + 300:
        raise CredentialError(f"--tls-client-cert {cert} is not valid before {info['notBefore']}")


def expand(value: str, option: str) -> str:
    """``value`` with each ``${VAR}`` replaced by the environment's VAR; an unset one raises
    :class:`CredentialError` naming ``option`` and the variable (never the value)."""

    def one(match: re.Match) -> str:
        got = os.environ.get(match.group(1))
        if got is None:
            raise CredentialError(f"{option} reads ${{{match.group(1)}}}, which is not set in the environment")
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
        if not found or not name or any(char.isspace() for char in name):
            shape = "'NAME: VALUE'" if sep == ":" else "KEY=VALUE"
            raise CredentialError(f"{option} takes {shape}, got one without a name: {name[:40]!r}")
        out.append((name.lower() if sep == "=" else name, expand(value.strip(), f"{option} {name}")))
    return tuple(out)


def verify_hint(error: BaseException, insecure: bool, client_cert: bool = False) -> str:
    """A failed handshake in one clause, with what to pass for it (``client_cert``: one was shown)."""
    text = _reason(error)
    low = text.lower()
    if "certificate required" in low or "certificate_required" in low:
        return (
            f"the server asks for a client certificate and got none ({text}); pass "
            f"--tls-client-cert FILE (and --tls-client-key FILE)"
        )
    if "alert handshake failure" in low:
        return (
            f"the server ended the TLS handshake ({text}): if it asks for a client certificate, pass "
            f"--tls-client-cert FILE"
        )
    if "certificate expired" in low:
        return f"the server refused the client certificate as expired ({text}): renew --tls-client-cert"
    if "unknown ca" in low or "bad certificate" in low or "certificate unknown" in low:
        return (
            f"the server refused the client certificate ({text}): is --tls-client-cert signed by a CA the "
            f"server trusts?"
        )
    if isinstance(error, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        return (
            f"its TLS certificate does not verify ({getattr(error, 'verify_message', None) or text}); "
            f"pass --tls-ca FILE for a private CA" + ("" if insecure else ", or --tls-insecure to skip the check")
        )
    if "EOF occurred in violation of protocol" in text:  # the server hung up mid-handshake
        return f"the server closed the connection during the TLS handshake ({text}): " + (
            "does it trust the CA that signed --tls-client-cert?"
            if client_cert
            else "if it asks for a client certificate, pass --tls-client-cert FILE; is the target plaintext "
            "(http://, ws://, grpc://)?"
        )
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text or "UNEXPECTED_EOF" in text:
        return f"the TLS handshake failed ({text}): is the target plaintext (http://, ws://, grpc://)?"
    return f"the TLS handshake failed ({text})"


def _reason(error: BaseException) -> str:
    return " ".join((str(getattr(error, "reason", None) or error) or type(error).__name__).split())[:160]
