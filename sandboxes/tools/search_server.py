"""An MCP tool server that searches a local corpus: ``search(query)`` and ``open(doc_id)``.

Run it over stdio: ``python search_server.py [--root DIR] [--corpus FOLDER]``. The corpus is every
UTF-8 text file under ``FOLDER`` (relative to the root, confined to it; ``.`` by default: the work
directory's own files), read afresh on each call; hidden files and folders below it are skipped.
A document's id is its path under the corpus folder without a ``.txt`` suffix, its title its first
non-empty line. Forge writes a task's corpus there before the server starts (a ``kv-search`` task's
documents as ``doc-NNN.txt``, each opening with ``Entry: NAME``), so the tool names and their answers
are the ``kv-search`` suite's in-process tools'.

Ranking: ten points per query word in the title (or the id), a hundred when the query's words, joined
by hyphens, appear in the title, and one per longer query word (more than three letters) that the
text holds; documents that score nothing are left out, the best ``--hits`` are listed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from confined import ToolError, confine, cut, parser, relative
from mcp.server.mcpserver import MCPServer

HITS = 5
SNIPPET_WORDS = 40
MAX_DOCUMENT = 1_000_000
MAX_DOCUMENTS = 5_000
MAX_OPEN = 64_000
WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Document:
    """One file of the corpus."""

    id: str
    title: str
    text: str

    @property
    def body(self) -> str:
        """The text after the title line."""
        return self.text.strip().partition("\n")[2]


def words(text: str) -> list[str]:
    return WORD.findall(text.casefold())


def documents(corpus: Path) -> list[Document]:
    """Every readable text file under ``corpus`` (hidden ones skipped), in path order."""
    found: list[Document] = []
    for here, dirs, files in os.walk(corpus):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(here) / name
            if name.startswith(".") or not path.is_file() or path.stat().st_size > MAX_DOCUMENT:
                continue
            try:
                text = path.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            doc_id = relative(corpus, path).removesuffix(".txt")
            title = next((line.strip() for line in text.splitlines() if line.strip()), doc_id)[:120]
            found.append(Document(doc_id, title, text))
            if len(found) >= MAX_DOCUMENTS:
                return found
    return found


def rank(docs: list[Document], query: str, hits: int = HITS) -> list[Document]:
    """The best-matching documents (see the module's docstring), best first; ties in corpus order."""
    asked = set(words(query))
    phrase = "-".join(words(query))
    scored = []
    for index, doc in enumerate(docs):
        title_words = set(words(doc.title)) | set(words(doc.id))
        score = 10 * len(asked & title_words) + (100 if phrase and phrase in "-".join(words(doc.title)) else 0)
        text = doc.text.casefold()
        score += sum(1 for w in asked if len(w) > 3 and w in text)
        if score:
            scored.append((-score, index, doc))
    return [doc for _, _, doc in sorted(scored, key=lambda s: s[:2])[:hits]]


def build_server(root: Path, corpus: str = ".", hits: int = HITS) -> MCPServer:
    """The server, searching ``corpus`` (a folder under ``root``)."""
    root = Path(os.path.realpath(root))
    folder = confine(root, corpus)
    server = MCPServer(name="forge-search", instructions=f"Searches the documents under {folder}.")

    def corpus_documents() -> list[Document]:
        if not folder.is_dir():
            raise ToolError(f"the corpus folder {relative(root, folder)!r} does not exist")
        return documents(folder)

    @server.tool()
    def search(query: str) -> str:
        """Search the archive; returns matching document ids with their titles and opening words."""
        if not words(query):
            raise ToolError("the query has no words to look for")
        found = rank(corpus_documents(), query, hits)
        if not found:
            return "no documents match"
        return "\n\n".join(f"{d.id}: {d.title}\n" + " ".join(d.body.split()[:SNIPPET_WORDS]) + " ..." for d in found)

    @server.tool()
    def open(doc_id: str) -> str:  # noqa: A001 - the tool's name, as the kv-search suite calls it
        """Open a document by its id; returns its whole text."""
        wanted = doc_id.strip().removesuffix(".txt")
        doc = next((d for d in corpus_documents() if d.id == wanted), None)
        if doc is None:
            raise ToolError(f"there is no document {doc_id!r} (search gives the ids)")
        return cut(f"{doc.id}\n{doc.text}", MAX_OPEN)

    return server


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--corpus", default=".", help="the corpus folder, relative to the root")
    args.add_argument("--hits", type=int, default=HITS, help="documents a search lists")
    ns = args.parse_args()
    build_server(ns.root, ns.corpus, ns.hits).run("stdio")


if __name__ == "__main__":
    main()
