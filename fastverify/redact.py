"""Secret names and masking: the one place that decides what is a secret and hides it.

A name (an environment variable, a flag without its dashes, a label) is secret when

- it contains SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH anywhere (`MY_SECRET`,
  `DB_PASSWORD`, `AUTHORIZATION`, `OAUTH_CLIENT`), or
- one of its words (split at `_`, `-`, `.`) is TOKEN, KEY or APIKEY (`HF_TOKEN`,
  `--api-key`, `WANDB_API_KEY`, `AWS_SECRET_ACCESS_KEY`).

Plural counts are not secrets: `--speculative-num-draft-tokens`, `MAX_TOKENS` and
`KEYS_PER_SHARD` stay visible.

A URL's credentials (`https://user:PASSWORD@host`, `https://TOKEN@host`) are secret too.

Masking replaces a secret value with `***`:
- `mask_env(env)`, `mask_argv(argv)` for structured data;
- `mask_text(text, known)` for free text, including messages written by other programs
  (an argparse error such as `unrecognized arguments: --api-key sk-...`): known secret
  values are replaced, then every `--secret-flag VALUE`, `--secret-flag=VALUE` and
  `SECRET_NAME=VALUE` in the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

MASK = "***"
_ANYWHERE = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
_WORDS = frozenset({"TOKEN", "KEY", "APIKEY"})
_SPLIT = re.compile(r"[_.\-]+")
# `--flag value` / `--flag=value` and `NAME=value` in free text (value: up to blank or quote)
_FLAG_IN_TEXT = re.compile(r"(--?[A-Za-z][\w.\-]*)(=|\s+)(['\"]?)([^\s'\"]+)")
_ASSIGN_IN_TEXT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=(['\"]?)([^\s'\"]+)")
# the userinfo of a URL: `scheme://USERINFO@` (USERINFO without '/', '@' or blanks)
_URL_CREDS = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://)([^/@\s'\"]+)@")


def is_secret_name(name: str) -> bool:
    """True for names whose values are never shown (see the module docstring)."""
    upper = name.strip().lstrip("-").upper()
    if not upper:
        return False
    if any(m in upper for m in _ANYWHERE):
        return True
    return any(word in _WORDS for word in _SPLIT.split(upper))


def secret_values(env: Mapping[str, str], argv: Sequence[str] = ()) -> list[str]:
    """Values to hide in any text: secret env values and secret flag values of `argv`,
    longest first (so a value containing another is masked whole). Values under 4
    characters are left alone (masking `1` everywhere would hide every number)."""
    found = {v for k, v in env.items() if is_secret_name(k)}
    for text in (*env.values(), *argv):
        found.update(url_credentials(text))
    hide_next = False
    for arg in argv:
        if hide_next:
            found.add(arg)
            hide_next = False
        elif arg.startswith("-"):
            flag, eq, value = arg.partition("=")
            if is_secret_name(flag):
                if eq:
                    found.add(value)
                else:
                    hide_next = True
    return sorted((v for v in found if len(v) >= 4), key=len, reverse=True)


def url_credentials(text: str) -> list[str]:
    """The secrets written into URLs of `text`: the password of `user:password@`, or the
    whole user part of `token@` (`https://ghp_...@github.com/...`)."""
    found = []
    for m in _URL_CREDS.finditer(text):
        user, colon, password = m.group(2).partition(":")
        found.append(password if colon else user)
    return [v for v in found if v and v != MASK]


def mask_urls(text: str) -> str:
    """`scheme://user:password@host` -> `scheme://user:***@host`, `scheme://token@host` ->
    `scheme://***@host`."""
    if "@" not in text or "://" not in text:
        return text

    def _creds(m: re.Match[str]) -> str:
        user, colon, _ = m.group(2).partition(":")
        return f"{m.group(1)}{user}:{MASK}@" if colon else f"{m.group(1)}{MASK}@"

    return _URL_CREDS.sub(_creds, text)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) else v) for k, v in env.items()}


def mask_argv(argv: Sequence[str]) -> list[str]:
    """Hide the values of secret-looking flags (`--api-key X`, `--hf-token=X`)."""
    out: list[str] = []
    hide_next = False
    for arg in map(mask_urls, argv):
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if arg.startswith("-"):
            flag, eq, _ = arg.partition("=")
            if is_secret_name(flag):
                if eq:
                    out.append(f"{flag}={MASK}")
                    continue
                hide_next = True
        out.append(arg)
    return out


def mask_text(text: str, known: Iterable[str] = ()) -> str:
    """Free text with known secret values and every secret flag/assignment value masked."""
    for value in known:
        if value and value in text:
            text = text.replace(value, MASK)
    text = mask_urls(text)

    def _flag(m: re.Match[str]) -> str:
        if not is_secret_name(m.group(1)) or m.group(4) == MASK or m.group(4).startswith("-"):
            return m.group(0)
        return f"{m.group(1)}{m.group(2)}{m.group(3)}{MASK}"

    def _assign(m: re.Match[str]) -> str:
        if not is_secret_name(m.group(1)) or m.group(3) == MASK:
            return m.group(0)
        return f"{m.group(1)}={m.group(2)}{MASK}"

    if "-" in text:
        text = _FLAG_IN_TEXT.sub(_flag, text)
    if "=" in text:
        text = _ASSIGN_IN_TEXT.sub(_assign, text)
    return text
