"""PII for the byte-level redaction proofs: generated values of every form the default detectors
promise to catch, a fixed table of the same forms for the slower paths, and the readers that look
for them in every byte a store, a run or a loop left on disk.

Each form is one row of the detectors' promise (tests/mem/test_redact.py holds the table): an
address with accented letters, a card grouped with thin spaces, a password inside a Redis URL, nine
bare digits after "SSN"… Values are drawn at random (checksums computed, so cards, IBANs and CN
IDs are valid), and every value is a :class:`Pii`: the text as written, with the words its detector
needs before it, plus what must never reach the disk (``secrets``) and its distinctive beginning
(``head``, which a cut through the value must not leave behind).
"""

from __future__ import annotations

import datetime
import json
import string
from collections.abc import Callable, Iterable
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from harness_mem.db import driver


class Pii(str):
    """A value as written, e.g. ``"SSN 123456789"`` or ``"ada@example.com"``.

    ``secrets``: the parts that must never be stored (the digits after "SSN", the password after
    "="; the whole value when its detector needs no context). ``head``: the beginning of the first
    secret that identifies it (a card's first twelve digits, an address's local part and "@"); the
    truncation proofs look for it, since a cut through a value must not leave its start behind.
    """

    kind: str
    secrets: tuple[str, ...]
    head: str

    def __new__(cls, text: str, kind: str, secrets: str | tuple[str, ...] | None = None,
                head: str | None = None) -> Pii:
        value = super().__new__(cls, text)
        value.kind = kind
        value.secrets = (secrets,) if isinstance(secrets, str) else tuple(secrets or (text,))
        first = value.secrets[0]
        value.head = head if head is not None else first[: max(8, 2 * len(first) // 3)]
        return value


# ---- checksums and layouts ------------------------------------------------------------------------


def luhn(body: str) -> str:
    digits = [int(d) for d in body + "0"]
    for i in range(len(digits) - 2, -1, -2):
        digits[i] = digits[i] * 2 - 9 if digits[i] * 2 > 9 else digits[i] * 2
    return body + str((10 - sum(digits) % 10) % 10)


def iban(country: str, bban: str) -> str:
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{country}{98 - int(numeric) % 97:02d}{bban}"


def cn_id(body17: str) -> str:
    weights = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    return body17 + "10X98765432"[sum(int(d) * w for d, w in zip(body17, weights, strict=True)) % 11]


def grouped(value: str, sep: str, sizes: Iterable[int] = ()) -> str:
    """``value`` in groups of ``sizes`` (then of four) joined by ``sep``."""
    parts, at = [], 0
    for size in [*sizes, *[4] * len(value)]:
        if at >= len(value):
            break
        parts.append(value[at:at + size])
        at += size
    return sep.join(parts)


def card_head(card: str) -> str:
    """A written card number up to its twelfth digit: what a cut card must not leave behind."""
    seen = 0
    for i, ch in enumerate(card):
        seen += ch.isdigit()
        if seen == 12:
            return card[: i + 1]
    return card


# ---- building blocks ---------------------------------------------------------------------------------

Draw = Callable[..., str]
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "_-"


def digits(draw: Draw, n: int) -> str:
    return draw(st.text(alphabet=string.digits, min_size=n, max_size=n))


def chars(draw: Draw, alphabet: str, n: int) -> str:
    return draw(st.text(alphabet=alphabet, min_size=n, max_size=n))


def token(draw: Draw, triples: int = 7) -> str:
    """A generated credential: a digit, a lower-case and an upper-case letter in turn, each class
    without repeats, so it reads as random to the detectors' entropy rule (16+ characters, letters
    and digits, 3+ bits a character, classes switching) while hypothesis still picks every character."""
    lower = draw(st.lists(st.sampled_from(string.ascii_lowercase), min_size=triples, max_size=triples, unique=True))
    upper = draw(st.lists(st.sampled_from(string.ascii_uppercase), min_size=triples, max_size=triples, unique=True))
    numbers = draw(st.lists(st.sampled_from(string.digits), min_size=triples, max_size=triples,
                            unique=triples <= 10))
    return "".join(d + lo + up for d, lo, up in zip(numbers, lower, upper, strict=True))


def form(build: Callable[[Draw], Pii]) -> st.SearchStrategy[Pii]:
    return st.composite(lambda draw: build(draw))()


# ---- the forms, by detector kind -----------------------------------------------------------------------
# Each entry is one way a value is written that the default detectors promise to catch.

LOCAL = r"[a-z][a-z0-9]{2,7}([._+\-][a-z0-9]{2,6})?"
DOMAIN = r"[a-z][a-z0-9]{1,8}(\.[a-z]{2,8})?\.(com|org|io|net|de|co\.uk)"


def _email(draw: Draw) -> Pii:
    local = draw(st.from_regex(LOCAL, fullmatch=True))
    return Pii(f"{local}@{draw(st.from_regex(DOMAIN, fullmatch=True))}", "EMAIL", head=f"{local}@")


def _email_unicode(draw: Draw) -> Pii:
    # Accented, Cyrillic or Han local parts and domains; the top-level label stays ASCII (a
    # non-ASCII one glued to CJK text would take the text along: still redacted, but not this value).
    local = draw(st.sampled_from(["josé", "zoë.müller", "иван", "ångström", "用户"]))
    domain = draw(st.sampled_from(["bücher", "café", "пример", "例子", "ελληνικά"]))
    unique = chars(draw, string.ascii_lowercase + string.digits, 4)
    if local == "用户":  # a Han local part is read back to the last non-letter: no ASCII suffix on it
        domain = f"{domain}.{unique}"
    else:
        local = f"{local}.{unique}"
    return Pii(f"{local}@{domain}.{draw(st.sampled_from(['de', 'com', 'org']))}", "EMAIL", head=f"{local}@")


def _area(draw: Draw) -> str:
    return str(draw(st.integers(200, 999)))


def _mobile_cn(draw: Draw) -> str:
    return "1" + draw(st.sampled_from("3456789")) + digits(draw, 1)


def _bare(words: list[str], shape: Callable[[Draw], str], kind: str) -> Callable[[Draw], Pii]:
    def build(draw: Draw) -> Pii:
        value = shape(draw)
        return Pii(f"{draw(st.sampled_from(words))} {value}", kind, value)
    return build


PHONE_WORDS = ["call me at", "Phone number:", "tel.", "mobile", "电话"]
SSN_WORDS = ["SSN", "ssn:", "Social Security Number:", "social security #"]

PHONES: dict[str, Callable[[Draw], str]] = {
    "cn": lambda draw: _mobile_cn(draw) + digits(draw, 8),
    "cn-spaced": lambda draw: f"{_mobile_cn(draw)} {digits(draw, 4)} {digits(draw, 4)}",
    "cn-dots": lambda draw: f"{_mobile_cn(draw)}.{digits(draw, 4)}.{digits(draw, 4)}",
    "plus-cn": lambda draw: f"+86 {_mobile_cn(draw)} {digits(draw, 4)} {digits(draw, 4)}",
    "e164": lambda draw: f"+{draw(st.integers(1, 9))}{digits(draw, 10)}",
    "plus-uk": lambda draw: f"+44 20 {digits(draw, 4)} {digits(draw, 4)}",
    "plus-us": lambda draw: f"+1 ({_area(draw)}) {_area(draw)}-{digits(draw, 4)}",
    "exit-00": lambda draw: f"00{draw(st.sampled_from(['1', '33', '44', '49', '86', '852']))} "
                            f"{digits(draw, 3)} {digits(draw, 4)} {digits(draw, 4)}",
    "exit-0044": lambda draw: f"0044 20 {digits(draw, 4)} {digits(draw, 4)}",
    "nanp": lambda draw: f"{_area(draw)}-{_area(draw)}-{digits(draw, 4)}",
    "nanp-paren": lambda draw: f"({_area(draw)}) {_area(draw)}-{digits(draw, 4)}",
    "nanp-dots": lambda draw: f"{_area(draw)}.{_area(draw)}.{digits(draw, 4)}",
    "nanp-1": lambda draw: f"1-{_area(draw)}-{_area(draw)}-{digits(draw, 4)}",
    "uk": lambda draw: f"020 {digits(draw, 4)} {digits(draw, 4)}",
    "uk-paren": lambda draw: f"(020) {digits(draw, 4)} {digits(draw, 4)}",
    "uk-mobile": lambda draw: f"07{digits(draw, 3)} {digits(draw, 6)}",
    "de": lambda draw: f"0{draw(st.integers(30, 999))} {digits(draw, 8)}",
    "de-slash": lambda draw: f"0{draw(st.integers(30, 99))}/{digits(draw, 8)}",
    "jp": lambda draw: f"0{draw(st.sampled_from(['3', '6', '90', '80']))}-{digits(draw, 4)}-{digits(draw, 4)}",
    "fr": lambda draw: f"0{draw(st.integers(1, 9))} " + " ".join(digits(draw, 2) for _ in range(4)),
    "fr-dots": lambda draw: f"0{draw(st.integers(1, 9))}." + ".".join(digits(draw, 2) for _ in range(4)),
    "cn-landline": lambda draw: f"0{draw(st.integers(10, 99))}-{digits(draw, 8)}",
    "cn-landline-4-4": lambda draw: f"0{draw(st.integers(100, 999))}-{digits(draw, 4)}-{digits(draw, 4)}",
}


def _phone(shape: Callable[[Draw], str]) -> Callable[[Draw], Pii]:
    return lambda draw: Pii(shape(draw), "PHONE")


def _card_number(draw: Draw, length: int, first: str = "3456") -> str:
    return luhn(draw(st.sampled_from(first)) + digits(draw, length - 2))


def _card(length: int, sep: str = "", sizes: tuple[int, ...] = (), first: str = "3456") -> Callable[[Draw], Pii]:
    def build(draw: Draw) -> Pii:
        number = _card_number(draw, length, first)
        written = grouped(number, sep, sizes) if sep else number
        return Pii(written, "CREDIT_CARD", head=card_head(written))
    return build


CARD_SEPARATORS = {"space": " ", "dash": "-", "dot": ".", "underscore": "_", "nbsp": "\u00a0",
                   "thin-space": "\u2009", "narrow-nbsp": "\u202f"}
# (country, BBAN pattern): a few registry lengths, letters where the country has them.
IBAN_COUNTRIES = [("DE", r"[0-9]{18}"), ("GB", r"[A-Z]{4}[0-9]{14}"), ("FR", r"[0-9]{10}[A-Z0-9]{11}[0-9]{2}"),
                  ("NL", r"[A-Z]{4}[0-9]{10}"), ("NO", r"[0-9]{11}"), ("CH", r"[0-9]{5}[A-Z0-9]{12}")]
# Lower case is promised for a BBAN of mostly digits: these countries' are.
IBAN_DIGIT_COUNTRIES = [("DE", r"[0-9]{18}"), ("GB", r"[A-Z]{4}[0-9]{14}"), ("NO", r"[0-9]{11}")]


def _iban(countries: list[tuple[str, str]], layout: Callable[[str], str]) -> Callable[[Draw], Pii]:
    def build(draw: Draw) -> Pii:
        country, pattern = draw(st.sampled_from(countries))
        return Pii(layout(iban(country, draw(st.from_regex(pattern, fullmatch=True)))), "IBAN")
    return build


def _ssn_parts(draw: Draw) -> tuple[str, str, str]:
    area = draw(st.integers(1, 899).filter(lambda a: a != 666))
    return f"{area:03d}", f"{draw(st.integers(1, 99)):02d}", f"{draw(st.integers(1, 9999)):04d}"


def _ssn(sep: str) -> Callable[[Draw], Pii]:
    return lambda draw: Pii(sep.join(_ssn_parts(draw)), "SSN")


def _cn_id_number(draw: Draw) -> str:
    region = draw(st.sampled_from(["110105", "310104", "440304", "510107", "650102"]))
    birth = draw(st.dates(min_value=datetime.date(1930, 1, 1), max_value=datetime.date(2020, 12, 31)))
    return cn_id(f"{region}{birth:%Y%m%d}{draw(st.integers(0, 999)):03d}")


def _cn_id(sep: str) -> Callable[[Draw], Pii]:
    def build(draw: Draw) -> Pii:
        value = _cn_id_number(draw)
        return Pii(sep.join((value[:6], value[6:14], value[14:])) if sep else value, "CN_ID")
    return build


def _ipv4(draw: Draw) -> Pii:
    # Octets of two and three digits: a short address like "1.2.3.4" could occur in a file by chance.
    # 127.x.x.x (loopback) is kept as it is, as nobody's address.
    octets = [draw(st.integers(11, 223).filter(lambda o: o != 127)), *(draw(st.integers(10, 255)) for _ in range(3))]
    return Pii(".".join(map(str, octets)), "IP_ADDRESS")


def _ipv6(compressed: bool) -> Callable[[Draw], Pii]:
    def build(draw: Draw) -> Pii:
        groups = [f"{draw(st.integers(0x1000, 0xFFFF)):x}", *(f"{draw(st.integers(1, 0xFFFF)):x}" for _ in range(7))]
        if compressed:  # "2001:db8::8a2e:370:7334"
            return Pii(":".join(groups[:2]) + "::" + ":".join(groups[5:]), "IP_ADDRESS")
        return Pii(":".join(groups), "IP_ADDRESS")
    return build


def _key(build: Callable[[Draw], str]) -> Callable[[Draw], Pii]:
    return lambda draw: Pii(build(draw), "API_KEY")


def _slack_webhook(draw: Draw) -> Pii:
    path = f"T{chars(draw, string.ascii_uppercase + string.digits, 8)}/B{chars(draw, string.ascii_uppercase, 8)}/"
    secret = token(draw, 8)
    return Pii(f"https://hooks.slack.com/services/{path}{secret}", "API_KEY", (path + secret, secret))


def _aws_secret(draw: Draw) -> str:
    return token(draw, 13) + draw(st.sampled_from("/+"))


def _aws_secret_near_id(draw: Draw) -> Pii:
    key_id, secret = "AKIA" + chars(draw, string.ascii_uppercase + string.digits, 16), _aws_secret(draw)
    return Pii(f"{key_id} {secret}", "API_KEY", (secret, key_id))


def _pem(escaped: bool) -> Callable[[Draw], Pii]:
    def build(draw: Draw) -> Pii:
        label = draw(st.sampled_from(["RSA ", "OPENSSH ", "EC ", ""]))
        body = [chars(draw, B64, 48), chars(draw, B64, 32)]
        newline = "\\n" if escaped else "\n"
        text = newline.join([f"-----BEGIN {label}PRIVATE KEY-----", *body, f"-----END {label}PRIVATE KEY-----"])
        return Pii(text, "PRIVATE_KEY", tuple(body))
    return build


def _assigned(template: str) -> Callable[[Draw], Pii]:
    """A credential written after a name or in a header: ``template`` with ``{}`` for the value."""
    def build(draw: Draw) -> Pii:
        secret = token(draw)
        return Pii(template.format(secret), "SECRET", secret)
    return build


HEXDIGITS = "0123456789abcdef"


def _es_dni(draw: Draw) -> Pii:
    number = digits(draw, 8)
    return Pii(number + "TRWAGMYFPDXBNJZSQVHLCKE"[int(number) % 23], "NATIONAL_ID")


def _url_credentials(template: str) -> Callable[[Draw], Pii]:
    def build(draw: Draw) -> Pii:
        user, host = chars(draw, string.ascii_lowercase, 5), chars(draw, string.ascii_lowercase, 6)
        secret = token(draw, 4)
        return Pii(template.format(user=user, password=secret, host=host), "SECRET", secret)
    return build


def _escaped_quotes(draw: Draw) -> Pii:
    parts = (token(draw, 3), token(draw, 3), token(draw, 3))
    return Pii('{{"password": "{}\\"{}\\"{}"}}'.format(*parts), "SECRET", parts)


FORMS: dict[str, st.SearchStrategy[Pii]] = {
    "email": form(_email),
    "email-unicode": form(_email_unicode),
    **{f"phone-{name}": form(_phone(shape)) for name, shape in PHONES.items()},
    "phone-bare-us": form(_bare(PHONE_WORDS, lambda draw: draw(st.sampled_from(["", "1"])) + str(
        draw(st.integers(2, 9))) + digits(draw, 2) + str(draw(st.integers(2, 9))) + digits(draw, 6), "PHONE")),
    "phone-bare-national": form(_bare(["tel.", "phone", "电话"], lambda draw: f"0{draw(st.integers(1, 9))}"
                                      + digits(draw, 9), "PHONE")),
    "card": form(_card(16)),
    "card-13": form(_card(13)),
    "card-15": form(_card(15)),
    "card-19": form(_card(19)),
    **{f"card-{name}": form(_card(16, sep)) for name, sep in CARD_SEPARATORS.items()},
    "card-amex": form(_card(15, " ", (4, 6, 5), first="3")),
    "card-unionpay-19": form(_card(19, " ", first="6")),
    "iban": form(_iban(IBAN_COUNTRIES, lambda v: v)),
    "iban-spaced": form(_iban(IBAN_COUNTRIES, lambda v: grouped(v, " "))),
    "iban-dashed": form(_iban(IBAN_COUNTRIES, lambda v: grouped(v, "-"))),
    "iban-lower": form(_iban(IBAN_DIGIT_COUNTRIES, lambda v: grouped(v, " ").lower())),
    "iban-lower-compact": form(_iban(IBAN_DIGIT_COUNTRIES, str.lower)),
    "ssn": form(_ssn("-")),
    "ssn-spaced": form(_ssn(" ")),
    "ssn-dots": form(_ssn(".")),
    "ssn-bare": form(_bare(SSN_WORDS, lambda draw: "".join(_ssn_parts(draw)), "SSN")),
    "cn-id": form(_cn_id("")),
    "cn-id-spaced": form(_cn_id(" ")),
    "cn-id-dashed": form(_cn_id("-")),
    "ipv4": form(_ipv4),
    "ipv6": form(_ipv6(compressed=False)),
    "ipv6-compressed": form(_ipv6(compressed=True)),
    "key-openai": form(_key(lambda draw: f"sk-proj-{chars(draw, ALNUM, 40)}")),
    "key-openai-legacy": form(_key(lambda draw: f"sk-{chars(draw, ALNUM, 48)}")),
    "key-anthropic": form(_key(lambda draw: f"sk-ant-api03-{chars(draw, ALNUM, 32)}")),
    "key-stripe": form(_key(lambda draw: f"{draw(st.sampled_from(['sk_live_', 'rk_test_']))}{chars(draw, ALNUM, 24)}")),
    "key-aws-id": form(_key(lambda draw: draw(st.sampled_from(["AKIA", "ASIA"]))
                            + chars(draw, string.ascii_uppercase + string.digits, 16))),
    "key-github": form(_key(lambda draw: f"gh{draw(st.sampled_from('pousr'))}_{chars(draw, ALNUM, 36)}")),
    "key-github-pat": form(_key(lambda draw: f"github_pat_{chars(draw, ALNUM + '_', 40)}")),
    "key-gitlab": form(_key(lambda draw: f"glpat-{chars(draw, ALNUM, 20)}")),
    "key-slack": form(_key(lambda draw: f"xox{draw(st.sampled_from('bp'))}-{digits(draw, 11)}-{digits(draw, 11)}-"
                                        f"{chars(draw, ALNUM, 24)}")),
    "key-slack-webhook": form(_slack_webhook),
    "key-google": form(_key(lambda draw: f"AIza{chars(draw, ALNUM + '_-', 35)}")),
    "key-google-oauth": form(_key(lambda draw: f"GOCSPX-{chars(draw, ALNUM, 28)}")),
    "key-huggingface": form(_key(lambda draw: f"hf_{chars(draw, ALNUM, 34)}")),
    "key-npm": form(_key(lambda draw: f"npm_{chars(draw, ALNUM, 36)}")),
    "key-aws-secret-named": form(_bare(["aws_secret", "AWS Secret Access Key:"], _aws_secret, "API_KEY")),
    "key-aws-secret-near-id": form(_aws_secret_near_id),
    "jwt": form(lambda draw: Pii(f"eyJ{chars(draw, B64URL, 20)}.eyJ{chars(draw, B64URL, 30)}."
                                 f"{chars(draw, B64URL, 43)}", "JWT")),
    "private-key": form(_pem(escaped=False)),
    "private-key-escaped": form(_pem(escaped=True)),
    "secret-password": form(_assigned("password={}")),
    "secret-password-spaced": form(_assigned("PASSWORD = {}")),
    "secret-db-password-quoted": form(_assigned("db_password: '{}'")),
    "secret-json-api-key": form(_assigned('{{"api_key": "{}"}}')),
    "secret-env-token": form(_assigned("GITHUB_TOKEN={}")),
    "secret-client-secret": form(_assigned("client_secret: {}")),
    "secret-url-query": form(_assigned("https://x.io/cb?a=1&token={}&b=2")),
    "secret-bearer-header": form(_assigned("Authorization: Bearer {}")),
    "secret-basic-header": form(_assigned("Authorization: Basic {}==")),
    "secret-bearer-word": form(_assigned("bearer {}")),
    "secret-url-userinfo": form(_url_credentials("https://{user}:{password}@{host}.example.com/path")),
    "secret-redis-url": form(_url_credentials("redis://:{password}@{host}.local:6379/0")),
    "secret-postgres-url": form(_url_credentials("postgres://{user}:{password}@{host}:5432/app")),
    "secret-escaped-quotes": form(_escaped_quotes),
    "secret-pass": form(_assigned("pass={}")),
    "secret-pw": form(_assigned("pw={}")),
    "secret-pwd": form(_assigned("pwd={}")),
    "secret-db-pass": form(_assigned("DB_PASS={}")),
    "secret-camel-pw": form(_assigned("login(dbPw={})")),
    "secret-json-pass": form(_assigned('{{"pass": "{}"}}')),
    "secret-cookie": form(_assigned("Cookie: session={}; theme=dark")),
    "secret-set-cookie": form(_assigned("Set-Cookie: id={}; Path=/; HttpOnly")),
    "secret-named-token": form(_assigned("MY_SERVICE_TOKEN={}")),
    "secret-json-api-key-camel": form(_assigned('"apiKey": "{}"')),
    "secret-key-base": form(_assigned("SECRET_KEY_BASE={}")),
    "secret-auth-key-id": form(_assigned("authKeyId: '{}'")),
    "secret-key": form(_assigned("key={}")),
    "secret-x-auth-key": form(_assigned("X-Auth-Key: {}")),
    "secret-session-key": form(_assigned("session_key_v2={}")),
    "secret-chinese": form(_assigned("密码={}")),
    # issue #41: provider formats with no words around them, national numbers, plain phrasings
    "key-sendgrid": form(_key(lambda draw: f"SG.{chars(draw, ALNUM, 22)}.{chars(draw, ALNUM, 43)}")),
    "key-twilio": form(_key(lambda draw: f"SK{chars(draw, HEXDIGITS, 32)}")),
    "key-mailgun": form(_key(lambda draw: f"key-{chars(draw, HEXDIGITS, 32)}")),
    "key-digitalocean": form(_key(lambda draw: f"dop_v1_{chars(draw, HEXDIGITS, 64)}")),
    "key-vault": form(_key(lambda draw: f"hvs.{chars(draw, ALNUM, 90)}")),
    "key-telegram": form(_key(lambda draw: f"{digits(draw, 10)}:AA{chars(draw, ALNUM, 33)}")),
    "key-age": form(_key(lambda draw: f"AGE-SECRET-KEY-1{chars(draw, 'QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L', 58)}")),
    # Two prefix letters HMRC issues (never BG, GB, KN, NK, NT, TN or ZZ), six digits, A-D.
    "national-uk-ni": form(lambda draw: Pii(draw(st.sampled_from(["AB", "CE", "HJ", "JK", "PR", "SW", "WX", "YZ"]))
                                            + digits(draw, 6) + draw(st.sampled_from("ABCD")), "NATIONAL_ID")),
    "national-es-dni": form(_es_dni),
    "secret-login-pair": form(_assigned("login admin / {}!")),
    "secret-curl-user": form(_assigned("curl -u deploy:{} https://ci.example.com")),
    "secret-xml": form(_assigned("<password>{}</password>")),
    "email-obfuscated": form(lambda draw: Pii(f"{chars(draw, string.ascii_lowercase, 6)}(at)example(dot)com", "EMAIL")),
}
PII = st.one_of(*FORMS.values())
# One value of every form, for the slower paths: a handful of examples still sends each form through.
EVERY_FORM = st.tuples(*FORMS.values()).map(list)

# For the slower paths (a store, a loop, an orchestrator per example): a handful of examples, each
# sending one value of every form through. No shrinking: every example holds a value of each form
# whatever the shrinker does, so it would only make the values plainer, for minutes; a failure
# already names the value that leaked.
SLOW_PATH = settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                            HealthCheck.data_too_large])

# Latin words sit next to a value with a separator between ("call 13800138000 now": glued to a
# letter, "abc13800138000" reads as an identifier); CJK text may be glued on directly, as people write.
FILLER = st.one_of(
    st.text(alphabet="abcdefghij klmnop", min_size=0, max_size=20).map(lambda s: f" {s} "),
    st.sampled_from(" ,;:()[]\n\t\"'").map(lambda s: f" {s} "),
    st.text(alphabet="用户的联系方式是请记下手机邮箱卡号", min_size=0, max_size=8),
)


# One value of each form, for paths too slow to run under hypothesis (orchestrator runs, agent loops).
# The first twelve are the ones the loop proofs name by position.
_CARD_16 = luhn("520082828282821")
_UNIONPAY = luhn("621234567890123456")
SAMPLES: tuple[Pii, ...] = (
    Pii("ada.lovelace@example.com", "EMAIL", head="ada.lovelace@"),
    Pii(luhn("453914880343646"), "CREDIT_CARD"),                  # a card, digits only
    Pii(grouped(luhn("401288888881188"), " "), "CREDIT_CARD"),     # a card, grouped
    Pii("AKIAIOSFODNN7EXAMPLE", "API_KEY"),                       # an AWS access key id
    Pii("13800138000", "PHONE"),                                  # a China mobile number
    Pii("(212) 555-0147", "PHONE"),                               # a North American number
    Pii("+44 20 7946 0958", "PHONE"),                             # an international number
    Pii(iban("DE", "370400440532013000"), "IBAN"),
    Pii(cn_id("11010519491231002"), "CN_ID"),
    Pii("078-05-1120", "SSN"),                                    # a US SSN
    Pii("ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "API_KEY"),
    Pii("sk-proj-" + "Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7jKl0n", "API_KEY"),
    # the widened forms
    Pii("josé.ramírez@bücher.de", "EMAIL", head="josé.ramírez@"),
    Pii("用户@例子.中国", "EMAIL"),
    Pii(grouped(_CARD_16, "."), "CREDIT_CARD", head=card_head(grouped(_CARD_16, "."))),
    Pii(grouped(luhn("371449635398431"), "\u00a0"), "CREDIT_CARD"),
    Pii(grouped(luhn("601100099013942"), "\u2009"), "CREDIT_CARD"),
    Pii(grouped(luhn("356600202036050"), "_"), "CREDIT_CARD"),
    Pii(grouped(_UNIONPAY, " "), "CREDIT_CARD"),                  # 19 digits, 4-4-4-4-3
    Pii(grouped(iban("GB", "WEST12345698765432"), " ").lower(), "IBAN"),
    Pii(grouped(iban("DE", "500105175407324931"), "-"), "IBAN"),
    Pii("219.09.9999", "SSN"),
    Pii("SSN 536904431", "SSN", "536904431"),
    Pii(grouped(cn_id("44030419900101123"), " ", (6, 8, 4)), "CN_ID"),
    Pii("020 7946 0321", "PHONE"),
    Pii("07700 900456", "PHONE"),
    Pii("030 87654321", "PHONE"),
    Pii("089/23456781", "PHONE"),
    Pii("03-5555-0199", "PHONE"),
    Pii("01 44 55 66 77", "PHONE"),
    Pii("06.12.34.56.79", "PHONE"),
    Pii("010-87654321", "PHONE"),
    Pii("139.1234.5678", "PHONE"),
    Pii("0044 20 7946 0777", "PHONE"),
    Pii("(020) 7946 0888", "PHONE"),
    Pii("call me at 4155550199", "PHONE", "4155550199"),
    Pii("10.123.234.156", "IP_ADDRESS"),
    Pii("2001:db8:85a3:8d3:1319:8a2e:370:7348", "IP_ADDRESS"),
    Pii("https://hooks.slack.com/services/T0A1B2C3D/B4E5F6G7H/abcdEFGHijklMNOPqrstUVWX", "API_KEY",
        ("T0A1B2C3D/B4E5F6G7H/abcdEFGHijklMNOPqrstUVWX", "abcdEFGHijklMNOPqrstUVWX")),
    Pii("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", "API_KEY"),
    Pii("hf_Qw3Er4Ty5Ui6Op7As8Df9Gh0Jk1Lz2Xc3V", "API_KEY"),
    Pii("npm_Mn0Bv9Cx8Za7Sd6Fg5Hj4Kl3Qw2Er1Ty0Ui9", "API_KEY"),
    Pii("glpat-Xy9Zw8Vu7Ts6Rq5Po4Nm3", "API_KEY"),
    Pii("aws_secret Wj7LkT9zQ2mXc4VbN8pR6sY1uE3aD5fG0hK7/+Ab", "API_KEY", "Wj7LkT9zQ2mXc4VbN8pR6sY1uE3aD5fG0hK7/+Ab"),
    Pii("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI5ODc2NTQzMjEwIiwibmFtZSI6IkFkYSJ9."
        "Xk3mQ9pL2vR7tY4wZ8nB1cD6fG0hJ5sA3eU7iO9kM2q", "JWT"),
    Pii("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAq8Zt3LmW9vXr2pKj7YbN\nQ4sHg6Tf1Ue8Ri0Wo5Pa\n"
        "-----END RSA PRIVATE KEY-----", "PRIVATE_KEY", ("MIIEpAIBAAKCAQEAq8Zt3LmW9vXr2pKj7YbN", "Q4sHg6Tf1Ue8Ri0Wo5Pa")),
    Pii("redis://:R3dQp9Lx2Kv@cache.local:6379/0", "SECRET", "R3dQp9Lx2Kv"),
    Pii("postgres://app:Pg7Hn2Wq9Zt@db.internal:5432/prod", "SECRET", "Pg7Hn2Wq9Zt"),
    Pii('{"password": "Jq4Lm\\"Xz8Rt\\"Vb2Nk"}', "SECRET", ("Jq4Lm", "Xz8Rt", "Vb2Nk")),
    Pii("pass=Hk5Tr8Wz2Qm", "SECRET", "Hk5Tr8Wz2Qm"),
    Pii("pw=Lp3Vn6Xc9Bs", "SECRET", "Lp3Vn6Xc9Bs"),
    Pii("Cookie: session=Sx4Ky7Mq1Dz9Fw; theme=dark", "SECRET", "Sx4Ky7Mq1Dz9Fw"),
    Pii("key=8f3kQz9LmW2xT7vBq1Zp", "SECRET", "8f3kQz9LmW2xT7vBq1Zp"),
    Pii("MY_SERVICE_TOKEN=Tz2Wq8Lm4Xv6Nb1Rk9", "SECRET", "Tz2Wq8Lm4Xv6Nb1Rk9"),
    Pii("Authorization: Bearer Be4rEr7tOk3nX9z2", "SECRET", "Be4rEr7tOk3nX9z2"),
    Pii("密码=Mm8Ch5Ns2Kx", "SECRET", "Mm8Ch5Ns2Kx"),
)


# ---- reading what reached the disk ---------------------------------------------------------------------


def database_files(root: Path) -> list[Path]:
    """Every SQLite database under ``root`` (the files next to a ``-wal`` or named ``*.db``)."""
    return sorted(p for p in root.rglob("*.db") if p.is_file())


def every_stored_text(db: Path) -> bytes:
    """The file, its WAL and shared memory, and every text or blob value of every table."""
    data = b"".join(p.read_bytes() for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name))
    return data + table_values(db)


def table_values(db: Path) -> bytes:
    """Every text or blob value of every table (FTS shadow tables included), read without writing."""
    data = b""
    conn = driver().connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if table.startswith("entries_vec") or table in ("entries_fts", "sqlite_sequence"):
                continue  # float vectors and the FTS table itself (its shadow tables are read)
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    if isinstance(value, str):
                        data += value.encode()
                    elif isinstance(value, bytes):
                        data += value
    finally:
        conn.close()
    return data


def every_written_byte(root: Path) -> bytes:
    """Every file under ``root`` (databases with their -wal and -shm, spill files, recordings, …)
    byte for byte, then the values of every table of every database there."""
    data = b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())
    for db in database_files(root):
        data += table_values(db)
    return data


def spellings(text: str) -> set[bytes]:
    """``text`` as it may sit in a file: UTF-8, or escaped inside a JSON string (ASCII-only JSON
    writes "\\u00a0" for a no-break space), each lower-cased (FTS lower-cases its tokens) the way
    :func:`assert_absent` lower-cases the data: ASCII letters only."""
    forms = {text, json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}
    return {f.encode().lower() for f in forms}


def assert_absent(values: Iterable[str], data: bytes, *, heads: bool = False) -> None:
    """No value, none of its secrets and, with ``heads``, none of their distinctive beginnings is in
    ``data``, in any letter case."""
    lowered = data.lower()
    for value in values:
        texts = [str(value), *getattr(value, "secrets", ())]
        if heads and isinstance(value, Pii):
            texts.append(value.head)
        for text in texts:
            for spelled in spellings(text):
                assert spelled not in lowered, (value, text)


def straddling(value: str, cut: int, offset: int) -> str:
    """Words, then ``value`` starting ``offset`` characters before position ``cut``: a cut there
    goes through the value. The words end with a space, so the value is not glued to one."""
    room = cut - offset
    return "note " * (room // 5) + " " * (room % 5) + value
