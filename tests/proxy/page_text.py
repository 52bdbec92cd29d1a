"""What a person reads on a server-rendered console page: the text of an element by its id, the
cells of a table's body rows, a ``json_script`` block (the standard library's HTML parser)."""

from __future__ import annotations

import json
from html.parser import HTMLParser

VOID_ELEMENTS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "wbr"}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.links: dict[str, list[str]] = {}  # table id → each body row's first link
        self._open: list[tuple[str, str | None]] = []  # (tag, id) of the open elements
        self._table: str | None = None
        self._in_body = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag in VOID_ELEMENTS:
            return
        self._open.append((tag, attributes.get("id")))
        if attributes.get("id"):
            self.texts.setdefault(attributes["id"], "")
        if tag == "table" and attributes.get("id"):
            self._table = attributes["id"]
            self.tables[self._table] = []
            self.links[self._table] = []
        elif tag == "tbody" and self._table:
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "a" and self._row is not None and len(self._row) == 0 and self._table:
            self.links[self._table].append(attributes.get("href") or "")

    def handle_endtag(self, tag):
        if tag in VOID_ELEMENTS:
            return
        while self._open:
            open_tag, _ = self._open.pop()
            if open_tag == tag:
                break
        if tag == "td" and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        for _, element_id in self._open:
            if element_id:
                self.texts[element_id] += data
        if self._cell is not None:
            self._cell.append(data)


class PageText:
    def __init__(self, html: str) -> None:
        self._page = _Page()
        self._page.feed(html)

    def text(self, element_id: str) -> str:
        """The element's text with its whitespace collapsed."""
        return " ".join(self._page.texts[element_id].split())

    def has(self, element_id: str) -> bool:
        return element_id in self._page.texts

    def rows(self, table_id: str) -> list[list[str]]:
        return self._page.tables[table_id]

    def row_links(self, table_id: str) -> list[str]:
        return self._page.links[table_id]

    def json(self, element_id: str):
        return json.loads(self._page.texts[element_id])
