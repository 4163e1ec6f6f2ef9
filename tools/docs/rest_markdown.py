"""A docstring in the project's reST-ish style as Markdown, for the generated API page.

tools/docs/reference.py (the MkDocs hook) imports it: MkDocs puts a hook's folder on
``sys.path`` while it loads the hook, and the tests load it the same way.

Guarantees: every character Markdown would read as markup is escaped unless it is meant as
markup (code spans, ``*em*``, ``**strong**``); lists, literal blocks and ``>>>`` sessions keep
their structure; a reference becomes a link only where the caller says its target exists,
so a strict MkDocs build checks every link made.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_ITEM = re.compile(r"(?P<indent> *)(?P<marker>[*+-]|\d+[.)]|#\.)[ \t]+(?P<text>\S.*)")
_UNDERLINE = re.compile(r"([=\-~^\"'`#*+])\1{2,}")
_INLINE = re.compile(
    r"(?P<role>:(?:[\w-]+:)*?(?P<role_kind>[\w-]+):`(?P<role_text>[^`]+)`)"
    r"|``(?P<literal>[^`]+(?:`[^`]+)*?)``"
    r"|`(?P<interpreted>[^`]+)`(?P<link>_{1,2})?"
    r"|\*\*(?P<strong>[^*`\s](?:[^*`]*[^*`\s])?)\*\*"
    r"|(?<![\w*\\])\*(?P<em>[^*`\s](?:[^*`]*[^*`\s])?)\*(?![\w*])"
)
_ROLE_TITLE = re.compile(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>")
_DOCS_PAGE = re.compile(r"\bdocs/(?P<page>(?:[\w.-]+/)*[\w-]+\.md)(?P<anchor>#[\w-]+)?")
_ESCAPED = re.compile(r"([\\`*_\[\]{}])")


class _Block:
    """A paragraph, a list item (or a further paragraph of one), a literal block, a title."""

    def __init__(
        self, kind: str, indent: int, lines: list[str], marker: str = "", lang: str = "text"
    ) -> None:
        self.kind = kind  # "para", "item", "item_para", "code", "heading"
        self.indent = indent
        self.lines = lines
        self.marker = marker  # an item's: "-", "*", "1." ...
        self.lang = lang  # a code block's
        self.depth = 0  # list nesting of an item or an item's paragraph


def rest_to_markdown(
    text: str,
    resolve: Callable[[str], str | None] | None = None,
    pages: Callable[[str], str | None] | None = None,
) -> str:
    """A docstring (already ``inspect.cleandoc``-ed) as Markdown.

    ``x`` and `x` become code spans; roles (``:class:`~h5feed.x.Y```, ``:func:``, ``:mod:``,
    ...) code spans of what Sphinx would show (with ``~``, the last dotted part), linked to
    the entry when ``resolve`` gives the target a public path; ``*em*`` and ``**strong**``
    stay; every other character Markdown would read as markup is escaped. Bullet and
    numbered lists become Markdown lists (with the blank line Markdown needs before one,
    continuation lines joined, nested by indentation); a literal block (after ``::``, or an
    indented block that is no list item's) and a ``>>>`` session become fenced code; a title
    underlined reST-style becomes a bold line (not a heading that would enter the page's
    table of contents). A docs page cited in the text (``docs/trainer/resume.md``, with or
    without ``#anchor``) becomes a link to the URL ``pages`` gives it (MkDocs then checks
    that page and anchor exist); one it gives none stays text."""
    links = _Links(resolve or _nothing, pages or _nothing)
    return _render(_blocks(text.splitlines()), links)


def _nothing(_: str) -> None:
    return None


class _Links:
    """Where a docstring's references lead: ``names`` for roles, ``pages`` for docs pages."""

    def __init__(
        self, names: Callable[[str], str | None], pages: Callable[[str], str | None]
    ) -> None:
        self.names = names
        self.pages = pages


def _blocks(lines: list[str]) -> list[_Block]:
    lines = [line.expandtabs(4).rstrip() for line in lines]
    blocks: list[_Block] = []
    current: _Block | None = None  # the block the next line may continue
    after_blank = True
    item_indents: list[int] = []  # the open list items' indents, outermost first
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(stripped) if stripped else 0
        if not stripped:
            current, after_blank = None, True
            i += 1
            continue
        after_colons = bool(blocks) and blocks[-1].lines[-1].endswith("::")
        doctest = stripped.startswith(">>>") and not after_colons
        if after_blank and (doctest or (indent > 0 and (after_colons or not item_indents))):
            # A literal block (after "::", or indented outside a list) or a doctest session.
            body, i = _literal(lines, i, indent, doctest)
            blocks.append(_Block("code", indent, body, lang="python" if doctest else "text"))
            current = None
            continue
        item = _ITEM.fullmatch(line)
        if item is not None and (
            item.group("marker") in "*+-" or after_blank or (current and current.kind == "item")
        ):
            while item_indents and item_indents[-1] >= indent:
                item_indents.pop()
            current = _Block("item", indent, [item.group("text")], item.group("marker"))
            current.depth = len(item_indents)
            item_indents.append(indent)
            blocks.append(current)
        elif current is not None and (current.kind != "item" or indent > current.indent):
            underlined = (
                current.kind == "para"
                and len(current.lines) == 1
                and _UNDERLINE.fullmatch(stripped) is not None
                and len(stripped) >= len(current.lines[0])
            )
            if underlined:
                current.kind, current = "heading", None
            else:
                current.lines.append(stripped)
        else:
            while item_indents and item_indents[-1] >= indent:
                item_indents.pop()
            if item_indents and after_blank:  # a further paragraph of the open list item
                current = _Block("item_para", indent, [stripped])
                current.depth = len(item_indents)
            else:
                item_indents.clear()
                current = _Block("para", indent, [stripped])
            blocks.append(current)
        after_blank = False
        i += 1
    return blocks


def _literal(lines: list[str], i: int, indent: int, doctest: bool) -> tuple[list[str], int]:
    """The literal block from line ``i`` (dedented by ``indent``; blank lines inside kept):
    up to a line indented less, or, for a doctest session, up to a blank line."""
    body: list[str] = []
    while i < len(lines):
        line = lines[i]
        if doctest and not line:
            break
        if line and len(line) - len(line.lstrip(" ")) < indent:
            break
        body.append(line[indent:])
        i += 1
    while body and not body[-1]:
        body.pop()
    return body, i


def _render(blocks: list[_Block], links: _Links) -> str:
    out: list[str] = []
    previous: _Block | None = None
    for block in blocks:
        if block.kind == "code":
            text = fence("\n".join(block.lines), block.lang)
        else:
            joined = " ".join(block.lines)
            if joined.endswith("::"):
                joined = joined[:-2].rstrip()
                joined = joined + ":" if joined else ""
            body_text = _inline(joined, links)
            if block.kind == "heading":
                text = f"**{body_text}**"
            elif block.kind == "item":
                marker = _markdown_marker(block.marker)
                text = f"{'    ' * block.depth}{marker} {body_text}"
            elif block.kind == "item_para":
                text = f"{'    ' * block.depth}{body_text}"
            else:
                text = _escape_block_start(body_text)
            if not text.strip():
                previous = block
                continue
        tight = previous is not None and previous.kind == "item" and block.kind == "item"
        if out:
            out.append("\n" if tight else "\n\n")
        out.append(text)
        previous = block
    return "".join(out)


def _markdown_marker(marker: str) -> str:
    """``*``/``+``/``-`` as ``-``; ``2)`` and ``#.`` as Markdown's ``2.`` and ``1.``."""
    if marker in ("*", "+", "-"):
        return "-"
    return "1." if marker == "#." else marker.replace(")", ".")


def _inline(text: str, links: _Links) -> str:
    out: list[str] = []
    position = 0
    for match in _INLINE.finditer(text):
        out.append(_plain(text[position : match.start()], links))
        position = match.end()
        if match.group("role"):
            out.append(_role(match.group("role_kind"), match.group("role_text"), links.names))
        elif match.group("literal") is not None:
            out.append(code_span(match.group("literal")))
        elif match.group("interpreted") is not None:
            content = match.group("interpreted")
            titled = _ROLE_TITLE.fullmatch(content) if match.group("link") else None
            if titled is not None:
                out.append(f"[{_escape(titled.group('title'))}]({titled.group('target')})")
            else:
                out.append(code_span(content))
        elif match.group("strong") is not None:
            out.append(f"**{_escape(match.group('strong'))}**")
        else:
            out.append(f"*{_escape(match.group('em'))}*")
    out.append(_plain(text[position:], links))
    return "".join(out)


def _plain(text: str, links: _Links) -> str:
    """Text outside any markup: escaped, with the docs pages it cites linked."""
    out: list[str] = []
    position = 0
    for match in _DOCS_PAGE.finditer(text):
        url = links.pages(match.group("page"))
        if url is not None:
            out.append(_escape(text[position : match.start()]))
            out.append(f"[{_escape(match.group(0))}]({url}{match.group('anchor') or ''})")
            position = match.end()
    out.append(_escape(text[position:]))
    return "".join(out)


def _role(kind: str, content: str, resolve: Callable[[str], str | None]) -> str:
    """``:class:`~h5feed.x.Y``` -> `Y`; ``:func:`title <target>``` -> `title`; linked to the
    target's entry when it has a public path."""
    titled = _ROLE_TITLE.fullmatch(content)
    if titled is not None:
        shown, target = titled.group("title"), titled.group("target")
    else:  # a target wrapped across lines is one word
        target = "".join(content.split()).lstrip("!")
        shown = target.removeprefix("~")
        if target.startswith("~"):
            shown = shown.rsplit(".", 1)[-1]
    target = target.lstrip("~!").removesuffix("()")
    public = resolve(target)
    if kind == "mod" and public != f"h5feed.{target.removeprefix('h5feed.')}":
        public = None  # a module links only to itself (h5feed.x.distribute is no function)
    return f"[{code_span(shown)}](#{public})" if public else code_span(shown)


def _escape(text: str) -> str:
    return _ESCAPED.sub(r"\\\1", text).replace("<", "&lt;")


def _escape_block_start(text: str) -> str:
    """A paragraph must not start as a heading, quote, list or rule would."""
    numbered = re.match(r"(\d+)([.)]\s)", text)
    if numbered is not None:
        return f"{numbered.group(1)}\\{text[numbered.end(1) :]}"
    return "\\" + text if text[:1] in ("#", ">", "+", "-", "=") else text


def code_span(text: str) -> str:
    """A Markdown code span of ``text``, whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if longest or text.startswith(" ") or text.endswith(" ") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(text: str, lang: str) -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    ticks = "`" * (longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"
