"""Which coordinator to talk to and with which credentials, resolved exactly as the ``plexus``
CLI resolves them (``cli/src/client.rs``, ``cli/src/args.rs``):

* URL: the ``url`` argument, else ``$PLEXUS_COORDINATOR``, else the context ``context`` /
  ``$PLEXUS_CONTEXT`` names, else the ``plexus up`` cluster in ``./.plexus`` (its URL file), else
  the current context (``plexus context``: ``$PLEXUS_CONFIG_DIR/contexts.toml``, else
  ``$XDG_CONFIG_HOME/plexus/``, else ``~/.config/plexus/``), else ``127.0.0.1:50051``; a context
  also gives its CA and token files unless they are given. Several
  URLs separated by commas name the coordinators of an HA control plane, tried in order. A bare
  ``host:port`` means ``https://`` (``http://`` with ``insecure``); an empty one, a scheme other
  than http(s), and a scheme that contradicts ``insecure`` are errors.
* Token: the ``token`` argument, else ``$PLEXUS_TOKEN`` (either ignored when blank), else the
  file ``token_file`` / ``$PLEXUS_TOKEN_FILE`` (a warning when others can read it), else ``./.plexus/coordinator/admin.token`` (the
  admin token of a ``plexus up`` cluster started in the current directory) when it exists. None
  is not an error: the coordinator says whether a call needs one.
* CA: the file ``ca`` / ``$PLEXUS_CA``, else ``./.plexus/coordinator/ca.pem`` when it exists.
* ``insecure``: plaintext, no CA and no token (a coordinator run with ``--insecure``).
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Tuple, Union
from urllib.parse import urlsplit

from .errors import ConfigError

#: Where the coordinator listens unless told otherwise (the port ``plexus up`` uses by default).
DEFAULT_COORDINATOR = "127.0.0.1:50051"
#: Where ``plexus up`` keeps its cluster by default.
UP_DIR = ".plexus"
#: The name every coordinator certificate holds and every client checks, whatever address it
#: dialled (``security/src/tls.rs``).
COORDINATOR_NAME = "coordinator.plexus"

_TOKEN = re.compile(r"plx_[0-9a-f]{12}_[0-9a-f]{64}")
_TOKEN_FORM = (
    "this is not a Plexus token: it should read plx_ followed by 12 hex digits, _ and 64 hex digits "
    "(81 characters in all)"
)

PathLike = Union[str, "os.PathLike[str]"]


def normalise_url(url: str, insecure: bool) -> str:
    """``https://`` (``http://`` when ``insecure``) added to a bare ``host:port``; an empty value
    and a scheme other than http(s) are a :class:`ConfigError` (they would otherwise mean a
    coordinator nobody asked for), as is a scheme that contradicts ``insecure``, saying which
    setting to change."""
    url = url.strip()
    scheme = "http" if insecure else "https"
    if not url:
        raise ConfigError(
            "the coordinator URL is empty (url=, or PLEXUS_COORDINATOR set but empty): give HOST:PORT or "
            f"{scheme}://HOST:PORT, or unset PLEXUS_COORDINATOR for {DEFAULT_COORDINATOR}"
        )
    if "://" in url:
        given, rest = url.split("://", 1)
        if given not in ("http", "https") or not rest:
            raise ConfigError(
                f"the coordinator URL {url!r} is not http(s) (scheme {given!r}): give HOST:PORT or {scheme}://HOST:PORT"
            )
    else:
        url = f"{scheme}://{url}"
    if not insecure and url.startswith("http://"):
        raise ConfigError(
            f"the coordinator URL {url} is plaintext http: write https:// (the default), "
            "or pass insecure=True for a coordinator run with --insecure"
        )
    if insecure and url.startswith("https://"):
        raise ConfigError(f"the coordinator URL {url} is https, and insecure=True turns TLS off: write http://")
    return url


def parse_token(text: str) -> str:
    """A token's text, checked (surrounding whitespace, such as a file's newline, is ignored)."""
    text = text.strip()
    if not _TOKEN.fullmatch(text):
        raise ConfigError(f"the token: {_TOKEN_FORM}")
    return text


def grpc_address(url: str) -> Tuple[str, bool]:
    """The ``host:port`` gRPC dials for a normalised URL, and whether it is TLS."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"invalid coordinator URL {url!r}: {e}") from e
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"invalid coordinator URL {url!r}: the scheme must be https (or http with insecure=True)")
    host = parts.hostname
    if not host:
        raise ConfigError(f"invalid coordinator URL {url!r}: no host")
    tls = parts.scheme == "https"
    port = port if port is not None else (443 if tls else 80)
    return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}"), tls


@dataclass(frozen=True)
class Target:
    """The coordinators (normalised URLs, in the order to try them) and the credentials."""

    urls: Tuple[str, ...]
    #: The cluster CA certificate (PEM); None with ``insecure``, or when none was found.
    ca: Optional[bytes]
    token: Optional[str]
    insecure: bool

    @staticmethod
    def resolve(
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        ca: Union[PathLike, bytes, None] = None,
        token_file: Optional[PathLike] = None,
        insecure: bool = False,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[PathLike] = None,
        context: Optional[str] = None,
    ) -> "Target":
        env = os.environ if env is None else env
        if url is None:
            url = env.get("PLEXUS_COORDINATOR")
        if url is None:
            picked = _from_contexts(context or env.get("PLEXUS_CONTEXT") or None, env, Path(cwd if cwd is not None else os.getcwd()))
            url = picked[0]
            if ca is None and picked[1] is not None and not env.get("PLEXUS_CA"):
                ca = picked[1]
            if token_file is None and picked[2] is not None and not env.get("PLEXUS_TOKEN_FILE"):
                token_file = picked[2]
        urls = tuple(normalise_url(u, insecure) for u in url.split(","))
        if insecure:
            return Target(urls=urls, ca=None, token=None, insecure=True)
        up = Path(cwd if cwd is not None else os.getcwd()) / UP_DIR / "coordinator"

        token_text: Optional[str] = None
        if token is not None and token.strip():
            token_text = token
        elif env.get("PLEXUS_TOKEN", "").strip():
            token_text = env["PLEXUS_TOKEN"]
        else:
            file = token_file if token_file is not None else env.get("PLEXUS_TOKEN_FILE") or None
            if file is not None:
                _warn_if_shared(Path(file))
                token_text = _read(Path(file), "the token file").decode("utf-8", errors="replace")
            else:
                token_text = _read_optional(up / "admin.token")
        parsed = parse_token(token_text) if token_text is not None else None

        ca_pem: Optional[bytes]
        where = "the CA certificate given as bytes"
        if isinstance(ca, bytes):
            ca_pem = ca
        elif isinstance(ca, str) and PEM_CERTIFICATE in ca:
            ca_pem, where = ca.encode(), "the CA certificate given as text"
        else:
            ca_file = ca if ca is not None else env.get("PLEXUS_CA") or None
            if ca_file is not None:
                ca_pem, where = _read(Path(ca_file), "the CA certificate"), f"the CA certificate {ca_file}"
            else:
                text = _read_optional(up / "ca.pem")
                ca_pem, where = (text.encode() if text is not None else None), f"the CA certificate {up / 'ca.pem'}"
        if ca_pem is not None and PEM_CERTIFICATE.encode() not in ca_pem:
            raise ConfigError(f"{where} is not a PEM certificate (no {PEM_CERTIFICATE} line): give ca.pem from the coordinator's data dir")
        return Target(urls=urls, ca=ca_pem, token=parsed, insecure=False)


def contexts_file(env: Mapping[str, str]) -> Optional[Path]:
    """Where the CLI's contexts are (``cli/src/context.rs``)."""
    if env.get("PLEXUS_CONFIG_DIR"):
        return Path(env["PLEXUS_CONFIG_DIR"]) / "contexts.toml"
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / "plexus" / "contexts.toml"
    if env.get("HOME"):
        return Path(env["HOME"]) / ".config" / "plexus" / "contexts.toml"
    return None


def _from_contexts(name: Optional[str], env: Mapping[str, str], cwd: Path) -> Tuple[str, Optional[str], Optional[str]]:
    """(URL, CA file, token file) when no URL is given: the named context, the ``plexus up``
    cluster in ``cwd/.plexus``, the current context, or the default URL."""
    def load() -> dict:
        f = contexts_file(env)
        if f is None or not f.is_file():
            return {}
        import tomllib

        try:
            return tomllib.loads(f.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{f} is not a contexts file: {e}") from None

    def use(all_: dict, n: str) -> Tuple[str, Optional[str], Optional[str]]:
        ctx = (all_.get("contexts") or {}).get(n)
        if not isinstance(ctx, dict) or not isinstance(ctx.get("coordinator"), str):
            known = ", ".join(sorted((all_.get("contexts") or {}).keys())) or "there are none"
            raise ConfigError(f"no context {n!r} ({known}; `plexus up` makes one)")
        return ctx["coordinator"], ctx.get("ca"), ctx.get("token_file")

    if name is not None:
        return use(load(), name)
    url_file = _read_optional(cwd / UP_DIR / "coordinator" / "url")
    if url_file is not None and url_file.strip():
        return url_file.strip(), None, None
    all_ = load()
    if isinstance(all_.get("current"), str):
        return use(all_, all_["current"])
    return DEFAULT_COORDINATOR, None, None


#: The first line of a certificate in PEM.
PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"


def _warn_if_shared(path: Path) -> None:
    """Warns when the token file can be read by its group or by others: whoever can read it can
    act as its holder."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return
    if mode & 0o077:
        warnings.warn(
            f"the token file {path} can be read by other users (mode {mode:o}); make it owner-only: chmod 600 {path}",
            stacklevel=3,
        )


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from e


def _read_optional(path: Path) -> Optional[str]:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
