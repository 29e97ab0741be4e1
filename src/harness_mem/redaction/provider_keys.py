"""Credentials that providers issue in a shape of their own, found by that shape alone.

Most providers now put a fixed prefix on their tokens (GitHub ``ghp_``, SendGrid ``SG.``, Vault
``hvs.``) precisely so that scanners can tell them without the words around them; the rest have a
structure as telling (a Telegram bot token's "<bot id>:AA…", a Discord token whose first part is a
user id in base64). Each entry here is one published format: its *needle* (a literal every such
token holds, which the redactor's gates and prescreen look for) and its pattern.

Patterns follow the rules of :mod:`.detectors`: each starts with its literal prefix, so ``re``
finds it with a fast substring search, and the "not inside a longer token" lookbehind comes right
after the prefix (before it, it would switch that search off; without it, "SKSKSK…" would be
rescanned from every position). Formats whose prefix is short or common ("SK", "key-", "dapi")
also fix their length and alphabet, so "SKU_1234" or "key-value" never match.
"""

from __future__ import annotations

import base64
import binascii
import re

__all__ = [
    "DISCORD_TOKEN",
    "PROVIDER_KEYS",
    "PROVIDER_NEEDLES",
    "TELEGRAM_BOT_TOKEN",
    "TERRAFORM_TOKEN",
    "locate_discord_token",
    "locate_telegram_bot_token",
    "locate_terraform_token",
]

_TOKEN_CHARS = r"[A-Za-z0-9_\-]"


def _token(lead: str, rest: str, *, after: str = _TOKEN_CHARS) -> re.Pattern[str]:
    """The literal ``lead`` then the pattern ``rest``, not inside a longer token: nothing of
    ``after`` right before it, no token character right after."""
    lead = re.escape(lead)
    return re.compile(rf"{lead}(?<!{after}{lead}){rest}(?!{_TOKEN_CHARS})", re.ASCII)


_HEX = "[0-9a-f]"
# An AWS key id is often glued to a name ("prod_AKIA…", "--AKIA…"): only a letter or digit before it
# makes it part of a longer word.
_ALNUM = "[A-Za-z0-9]"

#: (needle, pattern) for every provider format with a literal prefix, most common first.
PROVIDER_KEYS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sk-", _token("sk-", r"(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}")),  # OpenAI, Anthropic
    ("sk_", _token("sk_", r"(?:live|test)_[A-Za-z0-9]{16,}")),  # Stripe secret key
    ("rk_", _token("rk_", r"(?:live|test)_[A-Za-z0-9]{16,}")),  # Stripe restricted key
    ("whsec_", _token("whsec_", r"[A-Za-z0-9+/]{32,}={0,2}")),  # Stripe webhook signing secret
    ("AKIA", _token("AKIA", r"[A-Z0-9]{16}", after=_ALNUM)),  # AWS access key id
    ("ASIA", _token("ASIA", r"[A-Z0-9]{16}", after=_ALNUM)),  # AWS temporary access key id
    *((f"gh{kind}_", _token(f"gh{kind}_", r"[A-Za-z0-9]{36,}")) for kind in "pousr"),  # GitHub tokens
    ("github_pat_", _token("github_pat_", r"[A-Za-z0-9_]{22,}")),  # GitHub fine-grained tokens
    ("glpat-", _token("glpat-", r"[A-Za-z0-9_\-]{20,}")),  # GitLab personal access token
    ("glptt-", _token("glptt-", rf"{_HEX}{{40}}")),  # GitLab pipeline trigger token
    ("gldt-", _token("gldt-", r"[A-Za-z0-9_\-]{20,}")),  # GitLab deploy token
    ("glrt-", _token("glrt-", r"[A-Za-z0-9_\-]{20,}")),  # GitLab runner token
    *((f"xox{kind}-", _token(f"xox{kind}-", r"[A-Za-z0-9\-]{10,}")) for kind in "abposr"),  # Slack tokens
    ("xapp-", _token("xapp-", r"[0-9]-[A-Za-z0-9\-]{10,}")),  # Slack app-level token
    ("AIza", _token("AIza", r"[0-9A-Za-z_\-]{35}")),  # Google API key
    ("GOCSPX-", _token("GOCSPX-", r"[A-Za-z0-9_\-]{24,}")),  # Google OAuth client secret
    ("ya29.", _token("ya29.", r"[A-Za-z0-9_\-]{30,}")),  # Google OAuth access token
    ("hf_", _token("hf_", r"[A-Za-z0-9]{30,}")),  # Hugging Face
    ("npm_", _token("npm_", r"[A-Za-z0-9]{36,}")),  # npm
    ("pypi-", _token("pypi-", r"AgE[A-Za-z0-9_\-]{50,}")),  # PyPI (a macaroon: "pypi-AgEIcHlwaS5vcmc…")
    ("rubygems_", _token("rubygems_", rf"{_HEX}{{48}}")),  # RubyGems
    ("dckr_pat_", _token("dckr_pat_", r"[A-Za-z0-9_\-]{24,}")),  # Docker Hub
    ("SG.", _token("SG.", r"[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}")),  # SendGrid
    ("SK", _token("SK", rf"{_HEX}{{32}}")),  # Twilio API key
    ("key-", _token("key-", rf"{_HEX}{{32}}")),  # Mailgun
    ("xkeysib-", _token("xkeysib-", rf"{_HEX}{{64}}-[A-Za-z0-9]{{16}}")),  # Brevo (Sendinblue)
    ("_v1_", _token("do", rf"[opr]_v1_{_HEX}{{64}}")),  # DigitalOcean
    *((f"shp{kind}_", _token(f"shp{kind}_", r"[0-9a-fA-F]{32}")) for kind in ("at", "ss", "ca", "pa")),  # Shopify
    ("ATATT", _token("ATATT", r"[A-Za-z0-9_\-=]{60,}")),  # Atlassian API token
    *((f"sq0{kind}-", _token(f"sq0{kind}-", r"[A-Za-z0-9_\-]{22,43}")) for kind in ("atp", "csp")),  # Square
    *((f"hv{kind}.", _token(f"hv{kind}.", r"[A-Za-z0-9_\-]{24,}")) for kind in "sbr"),  # HashiCorp Vault
    ("dp.", _token("dp.", r"(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{40,}")),  # Doppler
    ("lin_", _token("lin_", r"(?:api|oauth)_[A-Za-z0-9]{40,}")),  # Linear
    ("secret_", _token("secret_", r"[A-Za-z0-9]{43}")),  # Notion (integration token)
    ("ntn_", _token("ntn_", r"[0-9]{11}[A-Za-z0-9]{35}")),  # Notion (since 2024)
    ("figd_", _token("figd_", r"[A-Za-z0-9_\-]{40,}")),  # Figma
    ("AGE-SECRET-KEY-1", _token("AGE-SECRET-KEY-1", r"[02-9AC-HJ-NP-Z]{58}")),  # age (bech32, upper case)
    ("dapi", _token("dapi", rf"{_HEX}{{32}}(?:-[0-9])?")),  # Databricks
    ("glsa_", _token("glsa_", rf"[A-Za-z0-9]{{32}}_{_HEX}{{8}}")),  # Grafana service account
    ("glc_", _token("glc_", r"[A-Za-z0-9+/]{32,}={0,2}")),  # Grafana Cloud
    ("pul-", _token("pul-", rf"{_HEX}{{40}}")),  # Pulumi
    ("PMAK-", _token("PMAK-", rf"{_HEX}{{24}}-{_HEX}{{34}}")),  # Postman
    ("NRAK-", _token("NRAK-", r"[A-Z0-9]{27}")),  # New Relic
    ("sbp_", _token("sbp_", rf"{_HEX}{{40}}")),  # Supabase
    ("gsk_", _token("gsk_", r"[A-Za-z0-9]{48,}")),  # Groq
    ("r8_", _token("r8_", r"[A-Za-z0-9]{37}")),  # Replicate
    ("pplx-", _token("pplx-", r"[A-Za-z0-9]{48}")),  # Perplexity
    ("bkua_", _token("bkua_", rf"{_HEX}{{40}}")),  # Buildkite
    ("pscale_", _token("pscale_", r"(?:tkn|pw|oauth)_[A-Za-z0-9_\-.]{32,64}")),  # PlanetScale
    ("tskey-", _token("tskey-", r"(?:auth|api|client|scim|webhook)-[A-Za-z0-9]{6,}-[A-Za-z0-9]{20,}")),  # Tailscale
    ("CFPAT-", _token("CFPAT-", r"[A-Za-z0-9_\-]{43}")),  # Contentful
    ("dt0c01.", _token("dt0c01.", r"[A-Z0-9]{24}\.[A-Z0-9]{64}")),  # Dynatrace
    *((f"sntry{kind}_", _token(f"sntry{kind}_", r"[A-Za-z0-9+/=_]{50,}")) for kind in "su"),  # Sentry
    ("ops_eyJ", _token("ops_eyJ", r"[A-Za-z0-9+/_\-]{100,}={0,2}")),  # 1Password service account
)

# A Telegram bot token: the bot's numeric id, ":", then 35 characters that start "AA". Matched from
# the rare ":AA", the id found looking back.
TELEGRAM_BOT_TOKEN = re.compile(r":AA(?<=[0-9]{8}:AA)[A-Za-z0-9_\-]{33}(?![A-Za-z0-9_\-])", re.ASCII)
_TELEGRAM_ID_DIGITS = (8, 10)


def locate_telegram_bot_token(match: re.Match[str]) -> tuple[int, int] | None:
    text, start = match.string, match.start()
    while start > 0 and text[start - 1].isascii() and text[start - 1].isdigit():
        start -= 1
    digits = match.start() - start
    if not _TELEGRAM_ID_DIGITS[0] <= digits <= _TELEGRAM_ID_DIGITS[1]:
        return None
    if start and (text[start - 1].isascii() and (text[start - 1].isalnum() or text[start - 1] in "_-")):
        return None
    return start, match.end()


# A Discord bot token: the bot's user id in base64, a timestamp, an HMAC, joined by dots. The first
# part is what tells it: it decodes to the 17-20 digits of a snowflake id (so a dotted identifier
# of that shape is not one), and base64 of ASCII digits starts "MD", "MT", "Mj", "Mz", "ND" … "Oz".
DISCORD_TOKEN = re.compile(
    r"[MNO](?<![A-Za-z0-9_\-.][MNO])[DTjz][A-Za-z0-9_\-]{22,26}+\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}+"
    r"(?![A-Za-z0-9_\-.])",
    re.ASCII,
)


def locate_discord_token(match: re.Match[str]) -> tuple[int, int] | None:
    user = match.group().split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(user + "=" * (-len(user) % 4))
    except (binascii.Error, ValueError):
        return None
    if not (17 <= len(decoded) <= 20 and decoded.isdigit()):
        return None
    # One digit at least, as every real one has: the prescreen passes text with a digit.
    return match.span() if any(ch.isdigit() for ch in match.group()) else None


# A Terraform Cloud / Enterprise API token: 14 characters, ".atlasv1.", then 60 or more. Matched from
# the infix, the 14 found looking back.
TERRAFORM_TOKEN = re.compile(
    r"\.atlasv1\.(?<=(?<![A-Za-z0-9_\-])[A-Za-z0-9]{14}\.atlasv1\.)[A-Za-z0-9_\-=]{60,}+", re.ASCII
)
_TERRAFORM_HEAD = 14


def locate_terraform_token(match: re.Match[str]) -> tuple[int, int] | None:
    return match.start() - _TERRAFORM_HEAD, match.end()


#: Every literal a provider token holds: if none is in a text, no rule of this module can match it.
PROVIDER_NEEDLES: tuple[str, ...] = (
    *(needle for needle, _ in PROVIDER_KEYS), ":AA", ".atlasv1.",
)
