"""An accessibility check of a page open in Chromium (through Playwright), for the browser tests.

What it holds a page to (WCAG 2.1 AA, the parts a machine can judge): the page has a language and a
title; a banner, one main and named navigation landmarks; one h1 and no heading level skipped; every
control and link has an accessible name, as Chromium's accessibility tree computes it (a label, its
text, an aria-label); every text has a contrast of 4.5:1 against what is behind it (3:1 when large);
and every control can be reached with the Tab key, with a visible focus outline when it is.
"""

from __future__ import annotations

from typing import Any

#: Roles whose nodes a person acts on: each needs a name to be announced by.
NAMED_ROLES = {"button", "link", "textbox", "searchbox", "combobox", "checkbox", "radio", "listbox", "spinbutton",
               "DisclosureTriangle"}

# Run in the page: the structure, and the contrast of each element that holds text of its own.
_STRUCTURE = """() => {
  const problems = [];
  if (!document.documentElement.lang) problems.push('the page has no lang');
  if (!document.title.trim()) problems.push('the page has no title');
  if (document.querySelectorAll('main').length !== 1) problems.push('not exactly one main landmark');
  if (!document.querySelector('header')) problems.push('no banner (header)');
  for (const nav of document.querySelectorAll('nav'))
    if (!nav.getAttribute('aria-label')) problems.push('a navigation landmark without a name');
  const headings = [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => +h.tagName[1]);
  if (headings.filter(l => l === 1).length !== 1) problems.push('not exactly one h1');
  headings.forEach((level, i) => {
    if (i && level > headings[i - 1] + 1) problems.push(`heading h${level} after h${headings[i - 1]}`);
  });
  const rgba = text => (text.match(/[\\d.]+/g) || ['0', '0', '0', '0']).map(Number);
  const luminance = ([r, g, b]) => {
    const c = [r, g, b].map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  const behind = el => {  // the first opaque background from the element outwards; white at the end
    for (let at = el; at; at = at.parentElement) {
      const bg = rgba(getComputedStyle(at).backgroundColor);
      if (bg.length < 4 || bg[3] > 0.5) return bg;
    }
    return [255, 255, 255, 1];
  };
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden') continue;
    const fg = rgba(style.color), bg = behind(el);
    const [a, b] = [luminance(fg), luminance(bg)].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    const size = parseFloat(style.fontSize), bold = +style.fontWeight >= 700;
    const needed = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    if (ratio < needed)
      problems.push(`contrast ${ratio.toFixed(2)} < ${needed} for <${el.tagName.toLowerCase()}> "${el.textContent.trim().slice(0, 40)}"`);
  }
  return problems;
}"""

# Run in the page: what a person can act on and sees (a control inside a closed <details> is not
# shown, so not reachable until its summary opens it).
_ACTIONABLE = """() => [...document.querySelectorAll(
    'a[href], button, input:not([type=hidden]), select, textarea, summary')]
  .filter(el => el.getClientRects().length && !el.closest('details:not([open]) > :not(summary)'))
  .map((el, i) => { el.dataset.a11yIndex = String(i); return i; }).length"""

_FOCUSED = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const style = getComputedStyle(el);
  return [el.dataset.a11yIndex ?? null, style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0];
}"""


def problems(page: Any) -> list[str]:
    """Everything on ``page`` that fails the checks above, one line each (empty: none)."""
    found: list[str] = list(page.evaluate(_STRUCTURE))
    session = page.context.new_cdp_session(page)
    try:
        tree = session.send("Accessibility.getFullAXTree")["nodes"]
    finally:
        session.detach()
    for node in tree:
        role = node.get("role", {}).get("value")
        if node.get("ignored") or role not in NAMED_ROLES:
            continue
        if not str(node.get("name", {}).get("value", "")).strip():
            found.append(f"a {role} without an accessible name")
    found += _keyboard(page)
    return found


def _keyboard(page: Any) -> list[str]:
    """Tab through the page from its top: every control is reached, each with a visible focus."""
    total = page.evaluate(_ACTIONABLE)
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    reached: set[str] = set()
    found = []
    for _ in range(total + 3):
        page.keyboard.press("Tab")
        focused = page.evaluate(_FOCUSED)
        if focused is None:
            continue
        index, outlined = focused
        if index is not None:
            if index in reached:
                break
            reached.add(index)
        if not outlined:
            found.append(f"control {index} shows no focus outline")
    missing = total - len(reached)
    if missing:
        found.append(f"{missing} of {total} controls cannot be reached with the Tab key")
    return found
