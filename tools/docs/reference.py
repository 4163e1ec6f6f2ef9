"""MkDocs hook: the reference pages, generated from the code at every build.

docs/reference/api.md holds the marker ``<!-- h5feed:api -->``. The hook replaces it with every
name of ``h5feed.__all__``, resolved through the package face (``getattr(h5feed, name)``, so
through h5feed/__init__.py's lazy ``__getattr__``) and shown under its public name, grouped,
each with its signature and its docstring turned from the project's reST-ish style into
Markdown. docs/reference/cli.md holds ``<!-- h5feed:cli -->``, replaced with the
``format_help()`` of ``h5feed.cli.build_parser()`` and of each of its subcommands, nested
ones (``h5feed bench scale``) included (tools/docs/cli_reference.py). docs/reference/stats.md
holds ``<!-- h5feed:stats -->``, replaced with the ``stats()`` keys and the ``/metrics``
families (tools/docs/stats_reference.py).

Guarantees:

1. Nothing is copied by hand: both pages come from the code of this checkout at each build
   (h5feed is imported from the directory above tools/; another h5feed is refused).
2. A public object (function, class, module) without a docstring of its own, or a name of
   ``h5feed.__all__`` that no section of the page places, fails the build with an error
   naming it, rather than publish an empty or missing entry.
3. A class of a section (``Feed``, ``BatchStream``) is listed with its public methods and
   properties, those it defines itself, each under its own heading (``h5feed.Feed.stats``)
   with its signature (``self`` left out) and docstring: one without a docstring fails the
   build too (guarantee 2).
4. Headings and signatures show public paths only (``h5feed.X``, ``h5feed.layouts.X``):
   a type named by an internal path in a signature is shown by its public path, or its bare
   name where it has none. Docstrings are shown as written (they may cite internal modules).
5. Reproducible: the help texts are formatted as on a terminal ``HELP_COLUMNS`` wide,
   whatever the terminal of the build; entries come in a fixed order.
6. Only parsers are built: no command's code runs.
"""

from __future__ import annotations

import argparse
import html
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

# Sibling modules: MkDocs puts this hook's folder on sys.path while it loads the hook.
import cli_reference
import stats_reference
from cli_reference import HELP_COLUMNS as HELP_COLUMNS  # re-exported: the tests read it
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from rest_markdown import code_span, fence, rest_to_markdown
from signatures import shown_annotation, signature_text
from stats_reference import STATS_MARKER

API_MARKER = "<!-- h5feed:api -->"
CLI_MARKER = "<!-- h5feed:cli -->"

#: The API page's sections: (title, names of ``h5feed.__all__``), in page order. The errors
#: and warnings (every exception class of ``__all__``), ``layouts`` and ``__version__`` have
#: sections of their own.
API_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Datasets and streams",
        ("dataset", "batches", "Feed", "BatchStream", "Cursor", "RaggedArray"),
    ),
    (
        "Trainers",
        (
            "keras_batches",
            "torch_batches",
            "distribute",
            "BackupAndRestore",
            "input_wait_callback",
            "merge_states",
        ),
    ),
)

#: This checkout: tools/docs/reference.py -> the repository root.
_ROOT = Path(__file__).resolve().parents[2]


class ReferenceBuildError(PluginError):
    """The reference cannot be generated truthfully (MkDocs prints the message and stops)."""


# --------------------------------------------------------------------------------------------
# The hook


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace the markers with the generated reference (pages without one are unchanged)."""
    if API_MARKER in markdown:
        if "attr_list" not in config.markdown_extensions:
            raise ReferenceBuildError(
                f"{page.file.src_uri}: the API reference needs the markdown extension "
                "attr_list (its anchors, e.g. #h5feed.dataset); add it to mkdocs.yml"
            )
        markdown = markdown.replace(API_MARKER, api_markdown(pages=_page_links(page, files)))
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_markdown())
    if STATS_MARKER in markdown:
        markdown = markdown.replace(STATS_MARKER, stats_reference.stats_markdown())
    return markdown


def _page_links(page: Page, files: Files) -> Callable[[str], str | None]:
    """A docs page a docstring cites (``docs/trainer/resume.md``, as ``trainer/resume.md``)
    -> its URL relative to ``page``; None when the site has no such page (left as text)."""
    up = "../" * page.file.src_uri.count("/")

    def link(src: str) -> str | None:
        return up + src if files.get_file_from_path(src) is not None else None

    return link


def import_h5feed() -> ModuleType:
    """``h5feed`` of this checkout (guarantee 1)."""
    if str(_ROOT) not in sys.path:
        sys.path.insert(0, str(_ROOT))
    import h5feed

    where = Path(h5feed.__file__ or "?").resolve().parent
    if where != _ROOT / "h5feed":
        raise ReferenceBuildError(
            f"h5feed was imported from {where}, not from this checkout ({_ROOT / 'h5feed'}): "
            "the reference would describe another version of it"
        )
    return h5feed


# --------------------------------------------------------------------------------------------
# The Python API page


class _Face:
    """The public names: object paths as a user writes them (``h5feed.X``,
    ``h5feed.layouts.X``), each also the anchor of its entry on the page. (No dataclasses
    in this file: MkDocs and the tests load it from its path, not as a module of a package.)"""

    def __init__(self, pages: Callable[[str], str | None] | None = None) -> None:
        self.paths: dict[str, str] = {}  # "dataset", "layouts.Flat" -> "h5feed.layouts.Flat"
        self.pages = pages  # links to the docs pages docstrings cite

    def add(self, key: str) -> None:
        self.paths[key] = f"h5feed.{key}"

    def resolve(self, target: str) -> str | None:
        """The public path of a docstring's reference (``dataset``, ``h5feed.dataset``,
        ``layouts.Flat``, ``Flat``, or an internal path such as
        ``h5feed.common.errors.ProtocolError`` by its last name), or None when it names
        nothing public."""
        key = target.removeprefix("h5feed.")
        for candidate in (key, f"layouts.{key}", f"layouts.{key.rsplit('.', 1)[-1]}"):
            if candidate in self.paths:
                return self.paths[candidate]
        if target.startswith("h5feed.") and "." in key:
            return self.resolve(key.rsplit(".", 1)[-1])
        return None

    def public_path(self, dotted: str) -> str:
        """``h5feed.common.layouts.Flat`` as ``h5feed.layouts.Flat``; an internal name
        without a public path as its bare name (guarantee 4)."""
        if dotted.removeprefix("h5feed.") in self.paths:
            return dotted
        name = dotted.rsplit(".", 1)[-1]
        return self.resolve(name) or name


def api_markdown(
    package: ModuleType | None = None, pages: Callable[[str], str | None] | None = None
) -> str:
    """The Python API reference of ``package`` (default: this checkout's ``h5feed``);
    ``pages`` links the docs pages docstrings cite (see :func:`rest_to_markdown`)."""
    h5feed = package if package is not None else import_h5feed()
    names: list[str] = list(h5feed.__all__)
    objects = {name: getattr(h5feed, name) for name in names}  # through the lazy __getattr__
    layouts = objects.get("layouts")
    layout_names: list[str] = list(layouts.__all__) if isinstance(layouts, ModuleType) else []

    face = _Face(pages)
    for name in names:
        face.add(name)
        if isinstance(objects[name], type) and not _is_exception(objects[name]):
            for member, _ in public_members(objects[name]):
                face.add(f"{name}.{member}")
    for name in layout_names:
        face.add(f"layouts.{name}")

    errors = [n for n in names if _is_exception(objects[n])]
    grouped = {n for _, group in API_GROUPS for n in group}
    placed = grouped | set(errors) | {"layouts", "__version__"}
    unplaced = [n for n in names if n not in placed]
    missing = sorted(placed - set(names) - set(errors))
    if unplaced or missing:
        raise ReferenceBuildError(
            "tools/docs/reference.py's API_GROUPS do not match h5feed.__all__: "
            + "; ".join(
                part
                for part in (
                    f"not placed in any section: {', '.join(unplaced)}" if unplaced else "",
                    f"not in h5feed.__all__: {', '.join(missing)}" if missing else "",
                )
                if part
            )
        )

    out: list[str] = []
    version = objects["__version__"]
    # Raw HTML: an attr_list id with "__" would be read as bold before it is an id.
    out.append(
        f'<p id="h5feed.__version__">This reference describes h5feed '
        f"<code>{html.escape(str(version))}</code> (<code>h5feed.__version__</code>).</p>"
    )
    for title, group in API_GROUPS:
        out.append(f"## {title}")
        out.extend(_entry(f"h5feed.{n}", objects[n], face, level=3, members=True) for n in group)
    if layouts is not None:
        out.append(_layouts_section(layouts, layout_names, face))
    out.append(_errors_section({n: objects[n] for n in errors}, face))
    return "\n\n".join(out) + "\n"


def _is_exception(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseException)


def _layouts_section(layouts: ModuleType, names: Sequence[str], face: _Face) -> str:
    parts = [
        "## Layouts: `h5feed.layouts` { #h5feed.layouts }",
        _docstring("h5feed.layouts", layouts, face),
    ]
    for name in names:
        obj = getattr(layouts, name)
        path = f"h5feed.layouts.{name}"
        if callable(obj) or isinstance(obj, ModuleType):
            parts.append(_entry(path, obj, face, level=3))
        else:  # a constant: its value is its documentation
            value = fence(f"{path} = {obj!r}", "python")
            parts.append(f"### {code_span(path)} {{ #{path} }}\n\n{value}")
    return "\n\n".join(parts)


def _errors_section(errors: Mapping[str, Any], face: _Face) -> str:
    """The hierarchy as a nested list, then one entry per class, in the hierarchy's order."""
    classes: dict[type, str] = {cls: f"h5feed.{name}" for name, cls in errors.items()}

    def parent(cls: type) -> type:
        # The nearest public base, or the first base from outside h5feed (a builtin).
        for base in cls.__mro__[1:]:
            if base in classes or not base.__module__.startswith("h5feed"):
                return base
        return BaseException

    children: dict[type, list[type]] = {}
    for cls in sorted(classes, key=lambda c: (issubclass(c, Warning), classes[c])):
        children.setdefault(parent(cls), []).append(cls)
    roots = [base for base in children if base not in classes]

    def label(cls: type) -> str:
        if cls in classes:
            return f"[{code_span(classes[cls])}](#{classes[cls]})"
        return code_span(cls.__qualname__)

    tree: list[str] = []
    order: list[type] = []

    def walk(cls: type, depth: int) -> None:
        tree.append(f"{'    ' * depth}- {label(cls)}")
        if cls in classes:
            order.append(cls)
        for child in children.get(cls, []):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    parts = ["## Errors and warnings", "\n".join(tree)]
    for cls in order:
        entry = _entry(classes[cls], cls, face, level=3, base=label(parent(cls)))
        parts.append(entry)
    return "\n\n".join(parts)


def _entry(
    path: str,
    obj: Any,
    face: _Face,
    *,
    level: int,
    base: str | None = None,
    members: bool = False,
) -> str:
    """A heading with the entry's anchor, the signature, the base class, the docstring; with
    ``members``, a class's public methods and properties after it (guarantee 3)."""
    parts = [f"{'#' * level} {code_span(path)} {{ #{path} }}"]
    if not isinstance(obj, ModuleType):
        parts.append(fence(signature_text(path, obj, face), "python"))
    if base is not None:
        parts.append(f"Base: {base}.")
    parts.append(_docstring(path, obj, face))
    if members and isinstance(obj, type):
        for name, member in public_members(obj):
            parts.append(_member_entry(f"{path}.{name}", member, face, level=level + 1))
    return "\n\n".join(parts)


def public_members(cls: type) -> list[tuple[str, Any]]:
    """The public methods and properties ``cls`` defines itself, in source order (a
    dataclass's fields are its signature's, not members)."""
    return [
        (name, attr)
        for name, attr in cls.__dict__.items()
        if not name.startswith("_")
        and (inspect.isfunction(attr) or isinstance(attr, (property, classmethod, staticmethod)))
    ]


def _member_entry(path: str, member: Any, face: _Face, *, level: int) -> str:
    """A method as its call (``self`` left out), a property as ``path: type``."""
    heading = f"{'#' * level} {code_span(path)} {{ #{path} }}"
    function: Any
    if isinstance(member, property):
        function = member.fget
        if function is None:  # a property without a getter: nothing to read
            raise ReferenceBuildError(f"{path} is a property without a getter")
        returns = inspect.signature(function).return_annotation
        shown = (
            "" if returns is inspect.Signature.empty else f": {shown_annotation(returns, face)!r}"
        )
        signature = f"{path}{shown}  # property"
    else:
        function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        bound = not isinstance(member, staticmethod)
        signature = signature_text(path, function, face, bound=bound)
    return "\n\n".join([heading, fence(signature, "python"), _docstring(path, function, face)])


def _docstring(path: str, obj: Any, face: _Face) -> str:
    """The object's own docstring as Markdown (a class's, not one inherited: guarantee 2)."""
    own = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    if not isinstance(own, str) or not own.strip():
        raise ReferenceBuildError(
            f"{path} has no docstring: the API reference would publish an empty entry; "
            f"write one where it is defined ({getattr(obj, '__module__', '?')})"
        )
    return rest_to_markdown(inspect.cleandoc(own), face.resolve, face.pages)


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The command line page (:func:`cli_reference.cli_markdown`) of ``parser``, by default
    the parser of this checkout's ``h5feed`` command (built, never run)."""
    if parser is None:
        import_h5feed()
        from h5feed.cli import build_parser

        parser = build_parser()
    return cli_reference.cli_markdown(parser)
