"""Writes bench/data/redaction_cases.jsonl: realistic secrets and PII, and harmless look-alikes.

Every value is synthetic: tokens are random strings in each provider's published format, national
numbers are random digits completed with their check digits (by ``harness_mem.redaction.checksums``
and the helpers below), and the seed is fixed, so the file is the same on every run. Each line is
either ``{"text", "kind", "secrets"}`` — the text as someone would write it, the kind a detector
should report, and the parts that must not survive redaction — or ``{"text", "harmless": true}``,
which must come out exactly as it went in. ``bench_redact.py --cases`` and
``tests/mem/test_detector_gaps.py`` read it. Run::

    .venv/bin/python bench/make_redaction_cases.py
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable
from pathlib import Path

from harness_mem.redaction import checksums

OUT = Path(__file__).parent / "data" / "redaction_cases.jsonl"
R = random.Random(41)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
UPPER_DIGITS = string.ascii_uppercase + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    # A letter, a digit and both cases in every token, as real ones have: a generated value that
    # happens to be all lower case is a test of luck, not of the detector.
    while True:
        value = "".join(R.choice(alphabet) for _ in range(n))
        if alphabet != ALNUM or n < 8 or (any(c.isdigit() for c in value) and not value.islower()
                                          and not value.isupper()):
            return value


def digits(n: int) -> str:
    return "".join(R.choice(string.digits) for _ in range(n))


def until(make: Callable[[], str], ok: Callable[[str], bool]) -> str:
    while True:
        value = make()
        if ok(value):
            return value


def luhn_complete(body: str) -> str:
    return until(lambda: body + R.choice(string.digits), checksums.luhn_ok)


positives: list[dict[str, object]] = []
harmless: list[str] = []


def secret(text: str, kind: str, *values: str) -> None:
    positives.append({"text": text, "kind": kind, "secrets": list(values)})


# ---- provider tokens, bare and in a sentence -------------------------------------------------------

TOKENS = {
    "OpenAI": lambda: "sk-proj-" + rand(48),
    "Anthropic": lambda: "sk-ant-api03-" + rand(80),
    "Stripe": lambda: "sk_live_" + rand(24),
    "Stripe restricted": lambda: "rk_live_" + rand(24),
    "Stripe webhook": lambda: "whsec_" + rand(32),
    "AWS key id": lambda: "AKIA" + rand(16, UPPER_DIGITS),
    "GitHub": lambda: "ghp_" + rand(36),
    "GitHub fine-grained": lambda: "github_pat_" + rand(22) + "_" + rand(59),
    "GitLab": lambda: "glpat-" + rand(20),
    "GitLab trigger": lambda: "glptt-" + rand(40, HEX),
    "Slack bot": lambda: "xoxb-" + digits(12) + "-" + digits(13) + "-" + rand(24),
    "Slack app": lambda: "xapp-1-A" + rand(10, UPPER_DIGITS) + "-" + digits(13) + "-" + rand(64, HEX),
    "Google API": lambda: "AIza" + rand(35),
    "Google OAuth secret": lambda: "GOCSPX-" + rand(28),
    "Google access token": lambda: "ya29." + rand(60),
    "Hugging Face": lambda: "hf_" + rand(34),
    "npm": lambda: "npm_" + rand(36),
    "PyPI": lambda: "pypi-AgEIcHlwaS5vcmc" + rand(60),
    "RubyGems": lambda: "rubygems_" + rand(48, HEX),
    "Docker": lambda: "dckr_pat_" + rand(27),
    "SendGrid": lambda: "SG." + rand(22) + "." + rand(43),
    "Twilio": lambda: "SK" + rand(32, HEX),
    "Mailgun": lambda: "key-" + rand(32, HEX),
    "Brevo": lambda: "xkeysib-" + rand(64, HEX) + "-" + rand(16),
    "DigitalOcean": lambda: "dop_v1_" + rand(64, HEX),
    "Shopify": lambda: "shpat_" + rand(32, HEX),
    "Atlassian": lambda: "ATATT3xFfGF0" + rand(170) + "=" + rand(8, "0123456789ABCDEF"),
    "Telegram": lambda: digits(10) + ":AA" + rand(33),
    "Square": lambda: "sq0atp-" + rand(22),
    "Vault": lambda: "hvs." + rand(90),
    "Doppler": lambda: "dp.pt." + rand(43),
    "Linear": lambda: "lin_api_" + rand(40),
    "Notion": lambda: "secret_" + rand(43),
    "Notion 2024": lambda: "ntn_" + digits(11) + rand(35),
    "Figma": lambda: "figd_" + rand(40),
    "Discord": lambda: (base64.urlsafe_b64encode(digits(18).encode()).decode().rstrip("=") + "." + rand(6)
                        + "." + rand(27)),
    "age": lambda: "AGE-SECRET-KEY-1" + rand(58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"),
    "Databricks": lambda: "dapi" + rand(32, HEX),
    "Grafana": lambda: "glsa_" + rand(32) + "_" + rand(8, HEX),
    "Grafana Cloud": lambda: "glc_" + rand(40),
    "Pulumi": lambda: "pul-" + rand(40, HEX),
    "Terraform": lambda: rand(14) + ".atlasv1." + rand(67),
    "Postman": lambda: "PMAK-" + rand(24, HEX) + "-" + rand(34, HEX),
    "New Relic": lambda: "NRAK-" + rand(27, UPPER_DIGITS),
    "Supabase": lambda: "sbp_" + rand(40, HEX),
    "Groq": lambda: "gsk_" + rand(52),
    "Replicate": lambda: "r8_" + rand(37),
    "Perplexity": lambda: "pplx-" + rand(48),
    "Buildkite": lambda: "bkua_" + rand(40, HEX),
    "PlanetScale": lambda: "pscale_tkn_" + rand(43),
    "Tailscale": lambda: "tskey-auth-k" + rand(10) + "-" + rand(30),
    "Contentful": lambda: "CFPAT-" + rand(43),
    "Dynatrace": lambda: "dt0c01." + rand(24, UPPER_DIGITS) + "." + rand(64, UPPER_DIGITS),
    "Sentry": lambda: "sntrys_" + rand(80),
}
for name, make in TOKENS.items():
    value = make()
    secret(value, "API_KEY", value)
    value = make()
    secret(f"here is the one for staging: {value} (rotate it on Friday)", "API_KEY", value)
    value = make()
    secret(f"2024-05-01 12:00:01 INFO worker-3 started with {value}", "API_KEY", value)
    value = make()
    secret(f'{{"{name}": "{value}"}}', "API_KEY", value)
aws = "AKIA" + rand(16, UPPER_DIGITS)
secret(f"export AWS_ACCESS_KEY_ID=prod_{aws}", "SECRET", aws)  # the whole value, as assigned
aws = "AKIA" + rand(16, UPPER_DIGITS)
secret(f"ci-{aws}", "API_KEY", aws)
aws = "ASIA" + rand(16, UPPER_DIGITS)
secret(f"temp creds --{aws}", "API_KEY", aws)
aws_secret = rand(40)
secret(f"aws_secret_access_key = {aws_secret}", "API_KEY", aws_secret)

# ---- national identity and tax numbers -------------------------------------------------------------


def dni() -> str:
    number = digits(8)
    return number + "TRWAGMYFPDXBNJZSQVHLCKE"[int(number) % 23]


def sin() -> str:
    return luhn_complete(R.choice("1234567") + digits(7))


def de_tax() -> str:
    return until(lambda: R.choice("123456789") + digits(10), checksums.de_tax_id_ok)


def insee() -> str:
    body = R.choice("12") + f"{R.randint(40, 99):02d}{R.randint(1, 12):02d}{R.randint(1, 95):02d}" + digits(6)
    return body + f"{97 - int(body) % 97:02d}"


def fiscal_code() -> str:
    body = rand(6, string.ascii_uppercase) + digits(2) + R.choice("ABCDEHLMPRST") + f"{R.randint(1, 28):02d}" \
        + R.choice(string.ascii_uppercase) + digits(3)
    return until(lambda: body + R.choice(string.ascii_uppercase), checksums.it_fiscal_code_ok)


def aadhaar() -> str:
    return until(lambda: R.choice("23456789") + digits(11), checksums.aadhaar_ok)


def pan() -> str:
    return rand(3, string.ascii_uppercase) + R.choice("PCHFATBLJG") + rand(1, string.ascii_uppercase) + digits(4) \
        + rand(1, string.ascii_uppercase)


def cpf() -> str:
    return until(lambda: digits(11), checksums.br_cpf_ok)


def bsn() -> str:
    return until(lambda: digits(9), checksums.nl_bsn_ok)


def personnummer() -> str:
    return until(lambda: f"{R.randint(40, 99):02d}{R.randint(1, 12):02d}{R.randint(1, 28):02d}" + digits(4),
                 checksums.se_personnummer_ok)


def tfn() -> str:
    return until(lambda: digits(9), checksums.au_tfn_ok)


def curp() -> str:
    body = (R.choice("BCDFGHJKLMNPRSTVZ") + R.choice("AEIOU") + rand(2, string.ascii_uppercase)
            + f"{R.randint(40, 99):02d}{R.randint(1, 12):02d}{R.randint(1, 28):02d}" + R.choice("HM")
            + rand(2, string.ascii_uppercase) + rand(3, "BCDFGHJKLMNPRSTVXZ") + R.choice("0123456789"))
    return until(lambda: body + R.choice(string.digits), checksums.mx_curp_ok)


def cpr() -> str:
    return f"{R.randint(1, 28):02d}{R.randint(1, 12):02d}{R.randint(40, 99):02d}-" + digits(4)


def pesel() -> str:
    return until(lambda: f"{R.randint(40, 99):02d}{R.randint(1, 12):02d}{R.randint(1, 28):02d}" + digits(5),
                 checksums.pl_pesel_ok)


def rrn() -> str:
    return until(lambda: f"{R.randint(40, 99):02d}{R.randint(1, 12):02d}{R.randint(1, 28):02d}-"
                 + R.choice("12") + digits(6), checksums.kr_rrn_ok)


def nino() -> str:
    return R.choice("ABCEGHJKLMNPRSTWXYZ") + R.choice("ABCEGHJKLMNPRSTWXYZ") + digits(6) + R.choice("ABCD")


def spaced(value: str, sizes: tuple[int, ...], sep: str = " ") -> str:
    parts, at = [], 0
    for size in sizes:
        parts.append(value[at : at + size])
        at += size
    return sep.join(parts)


IDS: list[tuple[Callable[[], str], list[Callable[[str], tuple[str, str]]]]] = [
    (nino, [lambda v: (f"My NI number is {spaced(v, (2, 2, 2, 2, 1))}.", spaced(v, (2, 2, 2, 2, 1))),
            lambda v: (v, v), lambda v: (f"national insurance: {v}", v)]),
    (sin, [lambda v: (f"SIN: {spaced(v, (3, 3, 3))}", spaced(v, (3, 3, 3))),
           lambda v: (f"my social insurance number is {spaced(v, (3, 3, 3), '-')}", spaced(v, (3, 3, 3), "-"))]),
    (de_tax, [lambda v: (f"Steuer-ID: {spaced(v, (2, 3, 3, 3))}", spaced(v, (2, 3, 3, 3))),
              lambda v: (f"Meine Steueridentifikationsnummer ist {v}", v)]),
    (insee, [lambda v: (f"numéro de sécurité sociale {spaced(v, (1, 2, 2, 2, 3, 3, 2))}",
                        spaced(v, (1, 2, 2, 2, 3, 3, 2))), lambda v: (f"NIR {v}", v)]),
    (dni, [lambda v: (f"DNI {v}", v), lambda v: (f"mi DNI es {v[:8]}-{v[8]}", f"{v[:8]}-{v[8]}")]),
    (fiscal_code, [lambda v: (f"codice fiscale: {v}", v), lambda v: (v, v)]),
    (aadhaar, [lambda v: (f"Aadhaar: {spaced(v, (4, 4, 4))}", spaced(v, (4, 4, 4))),
               lambda v: (f"my aadhaar number is {v}", v)]),
    (pan, [lambda v: (f"PAN {v}", v), lambda v: (f"send it to {v} please", v)]),
    (cpf, [lambda v: (f"CPF {v[:3]}.{v[3:6]}.{v[6:9]}-{v[9:]}", f"{v[:3]}.{v[3:6]}.{v[6:9]}-{v[9:]}"),
           lambda v: (f"CPF: {v}", v)]),
    (bsn, [lambda v: (f"BSN {v}", v), lambda v: (f"mijn burgerservicenummer is {v}", v)]),
    (personnummer, [lambda v: (f"personnummer {v[:6]}-{v[6:]}", f"{v[:6]}-{v[6:]}"),
                    lambda v: (f"Personnummer: 19{v}", f"19{v}")]),
    (tfn, [lambda v: (f"TFN {spaced(v, (3, 3, 3))}", spaced(v, (3, 3, 3))),
           lambda v: (f"my tax file number is {v}", v)]),
    (curp, [lambda v: (f"CURP {v}", v), lambda v: (v, v)]),
    (cpr, [lambda v: (f"CPR-nummer: {v}", v), lambda v: (f"cpr {v.replace('-', '')}", v.replace("-", ""))]),
    (pesel, [lambda v: (f"PESEL {v}", v), lambda v: (f"numer PESEL: {v}", v)]),
    (rrn, [lambda v: (f"주민등록번호 {v}", v), lambda v: (v, v), lambda v: (f"RRN: {v}", v)]),
]
for make_id, forms in IDS:
    for form in forms:
        text, raw = form(make_id())
        secret(text, "NATIONAL_ID", raw)
nie = until(lambda: R.choice("XYZ") + digits(7) + R.choice(string.ascii_uppercase), checksums.es_dni_ok)
secret(f"NIE {nie}", "NATIONAL_ID", nie)
ssn = f"{R.randint(100, 665)}-{R.randint(10, 99)}-{R.randint(1000, 9999)}"
secret(f"SSN {ssn}", "SSN", ssn)
card = luhn_complete("4" + digits(14))
secret(f"card {spaced(card, (4, 4, 4, 4))}", "CREDIT_CARD", spaced(card, (4, 4, 4, 4)))
card = luhn_complete("5" + R.choice("12345") + digits(13))
secret(f"mc {card} exp 04/29", "CREDIT_CARD", card)

# ---- passwords said plainly, and in config formats -------------------------------------------------


def password() -> str:
    return rand(5) + R.choice("!#%*+?") + digits(2) + rand(3)


PHRASES = [
    "pw: {p}", "PW: {p}", "Password for the admin account is {p}.", "the password to the wifi is {p}",
    "password of the shared mailbox is {p}", "login admin / {p}", "login: root/{p}", "creds are admin:{p}",
    "credentials: deploy:{p}", "my password is {p}", "the password is: {p}", "db password was {p}",
    "passphrase is {p}", "machine api.example.com login bob password {p}", "login bob password {p}",
    "log in as ops / {p}", "use creds svc-backup:{p} for the nightly job",
    "password={p}", "PASSWORD='{p}'", 'password: "{p}"', "DB_PASSWORD={p}", "db.password={p}",
    "  password: {p}\n", "spring.datasource.password={p}", "<password>{p}</password>",
    "<Password>{p}</Password>", "<ns:password>{p}</ns:password>", "<api-token>{p}</api-token>",
    '<add key="DbPassword" value="{p}"/>', '<param name="password" value="{p}" />',
    '<property name="db.password" value="{p}"/>', "curl -u admin:{p} https://api.example.com/v1",
    "curl -s --user 'deploy:{p}' https://ci.example.com", "curl --user=svc:{p} https://x.example.com",
    "wget --user x -u bob:{p} https://h.example.com", "mysql -u root -p{p} production",
    "mysqldump -h db -u backup -p{p} app > dump.sql", "docker login --password {p} registry.example.com",
    '{{"user": "ada", "password": "{p}"}}', "[database]\npassword = {p}\n", "export PGPASSWORD={p}",
    "redis://:{p}@cache.internal:6379/0", "postgres://app:{p}@db.internal:5432/app",
    "密码是{p}", "口令：{p}",
]
for phrase in PHRASES:
    value = password()
    secret(phrase.format(p=value), "SECRET", value)

# ---- e-mail addresses, phones, passports -------------------------------------------------------------

for template in ["{u}(at)example(dot)com", "{u} [at] example [dot] com", "{u}%40example.com",
                 "mail {u} (at) corp.example (dot) org", "{u}[at]example.co.uk", "{u} {{at}} example.io",
                 "{u}@example.com", "contact: {u}@mail.example.org", "<{u}@example.net>", "{u}＠example.com"]:
    user = "".join(R.choice(string.ascii_lowercase) for _ in range(6)) + "." + "".join(
        R.choice(string.ascii_lowercase) for _ in range(5))
    secret(template.format(u=user), "EMAIL", user)
for number in ["030 123456", "040 654321", "0221 12345", "(030) 12345678", "+49 30 123456", "030/1234567",
               "+44 20 7946 0958", "020 7946 0958", "+1 415 555 2671", "(415) 555-2671", "13800138000",
               "+86 138 0013 8000", "06 12 34 56 78", "03-1234-5678", "0151 23456789"]:
    secret(f"call me on {number} tomorrow", "PHONE", number)
for template in ["my UK passport no. is {v}", "passport number {v}", "Passport No.: {v}", "passport: {v}",
                 "护照号码 {v}", "US passport # {v}"]:
    value = R.choice("ABCDEFGHJK") + digits(8)
    secret(template.format(v=value), "PASSPORT", value)

# ---- harmless: code, local servers, numbers that only look like values ----------------------------

harmless += [
    'password = os.environ["DB_PASSWORD"]', "password = os.environ.get('DB_PASSWORD')",
    "api_key: str | None = None", "api_key: Optional[str] = None", "const token = await getToken()",
    "export API_KEY=$(cat ~/.secrets/api_key)", "TOKEN=`cat token.txt`", "password = getpass.getpass()",
    "token = request.headers['Authorization']", "self.password = password", "api_key = settings.OPENAI_API_KEY",
    "def login(user: str, password: str) -> bool:", "password?: string;", "secret = secrets.token_hex(32)",
    "password = input('Password: ')", "let apiKey = process.env.API_KEY;", "const secret = config.jwt.secret;",
    "token: string | undefined;", "private readonly apiKey: string;", "client_secret = creds.client_secret",
    "self.api_key = api_key or os.getenv('API_KEY')", "access_token = response.json()['access_token']",
    "token = jwt.encode(payload, key, algorithm='HS256')", "password_hash = bcrypt.hashpw(pw, salt)",
    "secret_key: SecretStr", "fn new(token: String) -> Self {", "var password = flag.String(\"password\", \"\", \"\")",
    "password = None", "token = ''", "api_key = ''", "password: ${DB_PASSWORD}", "api_key: <your key here>",
    "password: {{ vault_db_password }}", "secret: none", "token=true", "max_tokens=4096", "sort_key = created_at",
    "API_KEY=${API_KEY:?missing}", "PASSWORD=$DB_PASSWORD", "token = await client.auth.refresh()",
    "password = new PasswordField()", "token = yield from get_token()", "password = hash(password)",
    "let token = try await session.token()", "api_key = load_key(path)", "password = self._password",
    "server on 127.0.0.1:8080", "listen on 0.0.0.0:8000", "curl http://127.0.0.1:11434/api/tags",
    "uvicorn app:app --host 0.0.0.0 --port 8000", "ping 127.0.0.1", "bind to [::1]:8080",
    "listening on [::]:443", "DATABASE_URL=postgres://localhost:5432/app", "redis at 127.0.0.1:6379",
    "0.0.0.0/0 allows every address", "connect to localhost:3000", "http://127.0.0.1:5000/health is green",
    "version 2.10.4.1", "numpy==1.26.4", "released 2024-05-01", "order #84721930", "build 20240501-1234",
    "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39", "uuid 123e4567-e89b-12d3-a456-426614174000",
    "ISBN 978-0-306-40615-7", "at 12:30:45 we restarted", "PR #1234 fixes 5678", "size 1048576 bytes",
    "timestamp 1714567890", "took 1234567 ms", "port 8080 then 8443", "error code 0x80070005",
    "SKU_12345 is out of stock", "key-value store", "the dapi endpoint", "secret_santa list",
    "pass: 3, fail: 0", "the password is required", "the password is case-sensitive",
    "password is hashed with argon2id", "Reset your password from the settings page.",
    "the token expired after 3600 seconds", "rotate the key every 90 days", "login page / settings",
    "login at 10:30 tomorrow", "creds are in the vault", "git push -u origin main", "docker run -u 1000:1000 app",
    "ps -u root", "python -u train.py", "pip install --user requests", "mysql -u root -p", "curl -u $USER:$PASS https://x",
    "<password></password>", "<token>${TOKEN}</token>", '<add key="Timeout" value="30"/>',
    "<tokenizer>bert</tokenizer>", "meet me (at) noon", "email me at the usual address",
    "see [at] the bottom", "100%40 is not an address", "call at 3", "SSN field is optional",
    "passport photos due Friday", "Steuer-ID required for the form", "my BSN is on the card",
    "The AKIA prefix marks AWS keys", "sk-learn is a typo for sklearn", "use hf_hub_download()",
    "ghp_ tokens expire", "the xoxb- token type", "glpat- tokens are GitLab's", "npm_ prefix",
    "SG. is SendGrid's prefix", "hvs. tokens come from Vault", "AGE-SECRET-KEY-1 starts an age key",
    "ATATT tokens", "dop_v1_ is DigitalOcean", "figd_ is Figma", "lin_api_ is Linear", "pul- is Pulumi",
    "MyVeryLongClassNameHereXY.method.someOtherLongAttributeNameHere", "a.b.c", "user.name.first",
    "api.example.com", "logger.info('token refreshed')", "print(f'{password=}')",
    "if not password: raise ValueError('empty')", "assert token is not None", "return secret",
    "we paid the invoice", "the meeting is at 10.30", "chapter 3.2.1", "IP 10.0.0 is incomplete",
    "ratio 1.5:1", "see RFC 7519", "python3.11 -m venv .venv", "node v20.11.1",
    "QQ group chat", "ABC1234 is a ticket", "HTTP 404", "route /api/v1/login", "login flow / v2",
]
harmless = list(dict.fromkeys(harmless))

with OUT.open("w", encoding="utf-8") as out:
    for row in positives:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
    for text in harmless:
        out.write(json.dumps({"text": text, "harmless": True}, ensure_ascii=False) + "\n")
print(f"{len(positives)} positives, {len(harmless)} harmless -> {OUT}")
