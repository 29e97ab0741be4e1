"""Code that assigns to a credential's name without holding a credential.

``password = os.environ["DB_PASSWORD"]``, ``api_key: str | None = None``, ``const token = await
getToken()``, ``export API_KEY=$(cat ~/.key)``: the name says "secret", but what follows is where the
secret comes from, its type, or a variable. Redacting it would make code unreadable and teach
nothing worth hiding. :func:`is_code` tells such a value (as the assignment rule read it, up to the
first space or quote) from a literal credential.
"""

from __future__ import annotations

import re

__all__ = ["is_code"]

_IDENT = r"[A-Za-z_$][A-Za-z0-9_$]*"
# A name or attribute path, then a call or a subscript, as far as the value was read (it stops at a
# quote, a comma or a space): "os.environ[", "getpass.getpass()", "secrets.token_hex(32)", "input(",
# "jwt.encode(payload", "response.json()[". The name has three characters at least, and a call's
# parenthesis is closed or followed by a name: "A(00" and "Ab(12)" are passwords.
_CALL_OR_LOOKUP = re.compile(
    rf"(?=[^(\[]{{3}}){_IDENT}(?:\.{_IDENT})*(?:\((?:[A-Za-z_$)\[{{].*|.*\).*)?|\[.*)", re.ASCII | re.DOTALL
)
# An attribute path: "settings.OPENAI_API_KEY", "process.env.API_KEY;", "self._token".
_ATTRIBUTE = re.compile(rf"{_IDENT}(?:\.{_IDENT})+[;,)]*", re.ASCII)
# A type annotation: "str", "str)", "Optional[str]", "SecretStr,", "string;".
_TYPE = re.compile(
    r"(?:str|bytes|int|string|String|SecretStr|SecretBytes|Secret|Any|object|number|unknown|"
    r"(?:Optional|Union|Annotated|Literal|Secret|list|List|dict|Dict|tuple|Tuple)\[.*)[\]),;?]*",
    re.ASCII | re.DOTALL,
)
# Words that start an expression, not a value: "await getToken()", "new Token(", "yield …".
_KEYWORDS = frozenset({
    "await", "new", "yield", "typeof", "lambda", "function", "async", "require", "import", "try", "raise", "return",
    "throw", "not", "if", "else", "and", "or", "in", "is", "for", "while", "def", "class", "const", "let", "var",
})  # fmt: skip
# Shell substitutions ("$(cat key)", "`cat key`", "${API_KEY:?missing}"), and the end of an
# expression around the name ("f'{password=}'"): nothing is assigned.
_SUBSTITUTION = ("$(", "`", "${", ")", "]", "}")


def is_code(value: str, name: str) -> bool:
    """Whether ``value``, assigned to ``name``, is code rather than a literal value."""
    if value.startswith(_SUBSTITUTION) or value in _KEYWORDS:
        return True
    if name.rfind("${") > name.rfind("}"):
        return True  # "${API_KEY:?missing}", "${TOKEN:-}": a default inside a parameter expansion
    if _TYPE.fullmatch(value) or _CALL_OR_LOOKUP.fullmatch(value) or _ATTRIBUTE.fullmatch(value):
        return True
    # "self.password = password", "token: token,": the variable of the same name.
    bare = value.rstrip(";,)")
    return bare.isidentifier() and name.lower().endswith(bare.lower())
