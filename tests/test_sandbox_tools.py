"""Forge's MCP tool servers (sandboxes/tools/), each spoken to by the SDK's real MCP client over a real
stdio session: the files tools on random inputs (write/read round trip, edit == str.replace, paths that
leave the root refused), the shell's timeout and output cap, and search over a kv-search corpus giving
what the suite's in-process tools give."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.paths import data_dir

TOOLS = data_dir("sandboxes") / "tools"
EXAMPLES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class StdioServer:
    """One shipped server over a real stdio MCP session, on an event loop in a thread of its own, so
    that (hypothesis-driven) tests call its tools synchronously."""

    def __init__(self, script: str, root: Path, *args: str) -> None:
        from mcp import StdioServerParameters

        self.params = StdioServerParameters(command=sys.executable, args=[str(TOOLS / script), "--root", str(root), *args])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ready: concurrent.futures.Future = concurrent.futures.Future()  # the tools, once the server is up
        self.main = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)
        self.tools = self.ready.result(60)

    async def _serve(self) -> None:
        from mcp import ClientSession
        from mcp.client.stdio import stdio_client

        self.stop = asyncio.Event()
        try:
            async with stdio_client(self.params) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    self.session = session
                    self.ready.set_result({t.name: t for t in (await session.list_tools()).tools})
                    await self.stop.wait()
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            raise

    def call(self, name: str, **arguments):
        """``(is_error, text)`` of one tool call."""
        result = asyncio.run_coroutine_threadsafe(self.session.call_tool(name, arguments), self.loop).result(120)
        return result.is_error, "\n".join(block.text for block in result.content)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.main.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def served(tmp_path):
    """``served(script, *args)``: a running server acting in ``tmp_path / "root"`` (stopped after the test)."""
    root = tmp_path / "root"
    root.mkdir()
    started: list[StdioServer] = []

    def serve(script: str, *args: str) -> StdioServer:
        started.append(StdioServer(script, root, *args))
        return started[-1]

    yield serve
    for server in started:
        server.close()


@pytest.fixture
def files(served):
    """The files server, one per test (hypothesis runs all of a test's examples against it)."""
    return served("files_server.py")


# ---- files ---------------------------------------------------------------------------------------------

NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
RELATIVE = st.lists(NAME, min_size=1, max_size=3).map("/".join)


def test_files_server_lists_its_tools_with_schemas(files):
    assert set(files.tools) == {"read_file", "write_file", "edit_file", "list_files"}
    edit = files.tools["edit_file"].input_schema
    assert set(edit["required"]) == {"path", "old", "new"} and edit["properties"]["replace_all"]["type"] == "boolean"


CONTENT = st.lists(st.one_of(st.text(max_size=40), st.sampled_from(["\r\n", "\r", "\n", "\t", "\x00", " "])),
                   max_size=40).map("".join)


@EXAMPLES
@given(path=RELATIVE, content=CONTENT)
def test_write_then_read_gives_back_exactly_what_was_written(files, tmp_path, path, content):
    root = tmp_path / "root"
    if (root / path).is_dir() or any((root / p).is_file() for p in _parents(path)):
        return  # a folder of that name exists, or a parent is a file: not this property's case
    error, said = files.call("write_file", path=path, content=content)
    assert not error, said
    assert (root / path).read_bytes() == content.encode("utf-8")  # on disk, line endings and all
    assert files.call("read_file", path=path) == (False, content)


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


TEXT = st.text(alphabet="ab\n xé", max_size=60)


@EXAMPLES
@given(text=TEXT, old=st.text(alphabet="ab\n xé", min_size=1, max_size=4), new=TEXT, replace_all=st.booleans())
def test_edit_is_the_plain_str_replace(files, tmp_path, text, old, new, replace_all):
    target = tmp_path / "root" / "f.txt"
    target.write_bytes(text.encode())
    error, said = files.call("edit_file", path="f.txt", old=old, new=new, replace_all=replace_all)
    count = text.count(old)
    if count == 0:
        assert error and "does not occur" in said
    elif count > 1 and not replace_all:
        assert error and f"occurs {count} times" in said
    else:
        assert not error, said
        assert target.read_bytes().decode() == text.replace(old, new)
        return
    assert target.read_bytes().decode() == text  # a refused edit changes nothing


def test_edit_and_read_refuse_clearly(files, tmp_path):
    (tmp_path / "root" / "folder").mkdir()
    assert files.call("edit_file", path="f.txt", old="a", new="b") == (True, "Error executing tool edit_file: no file 'f.txt'")
    error, said = files.call("read_file", path="folder")
    assert error and "(it is a folder)" in said
    (tmp_path / "root" / "f.txt").write_text("abc")
    error, said = files.call("edit_file", path="f.txt", old="", new="x")
    assert error and "old is empty" in said
    (tmp_path / "root" / "bin").write_bytes(b"\xff\xfe")
    error, said = files.call("read_file", path="bin")
    assert error and "not UTF-8" in said


SEGMENT = st.sampled_from(["..", ".", "a", "b", "out", "..", "/etc", "/", "link"])


@EXAMPLES
@given(parts=st.lists(SEGMENT, min_size=1, max_size=5))
def test_a_path_leaving_the_root_is_refused_by_every_file_tool(files, tmp_path, parts):
    root = tmp_path / "root"
    if not (root / "link").is_symlink():
        (tmp_path / "outside").mkdir()
        (tmp_path / "outside" / "secret").write_text("no")
        (root / "link").symlink_to(tmp_path / "outside")  # a link that points out of the root
    path = "/".join(parts).replace("//", "/")
    resolved = Path(os.path.realpath(root / path))
    leaves = resolved != root and root not in resolved.parents
    before = sorted(p.name for p in (tmp_path / "outside").iterdir())
    for tool, arguments in (("read_file", {}), ("write_file", {"content": "x"}), ("list_files", {}),
                            ("edit_file", {"old": "no", "new": "yes"})):
        error, said = files.call(tool, path=path, **arguments)
        if leaves:
            assert error and "outside the working folder" in said, (tool, path, said)
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == before
    assert (tmp_path / "outside" / "secret").read_text() == "no"


def test_list_files_lists_every_file_below_a_folder(files):
    for path in ("b.txt", "a/x.txt", "a/deep/y.txt"):
        files.call("write_file", path=path, content=path)
    assert files.call("list_files") == (False, "b.txt\na/x.txt\na/deep/y.txt")
    assert files.call("list_files", path="a") == (False, "a/x.txt\na/deep/y.txt")
    assert files.call("list_files", path="nowhere")[0]


# ---- shell ---------------------------------------------------------------------------------------------


def test_shell_runs_in_the_root_and_reports_the_exit_code(served, tmp_path):
    shell = served("shell_server.py")
    assert set(shell.tools) == {"shell"}
    error, said = shell.call("shell", command="pwd; echo oops >&2; exit 3")
    assert not error and said == f"{tmp_path / 'root'}\noops\n[exit code 3]"
    assert shell.call("shell", command="  ")[0]


def test_shell_kills_a_command_at_its_timeout_with_what_it_started(served):
    shell = served("shell_server.py", "--timeout", "30")
    mark = f"{4000 + os.getpid() % 1000}.{time.time_ns() % 10**6}"  # this run's own sleeps
    error, said = shell.call("shell", command=f"echo started; (sleep {mark}1 &); sleep {mark}2", timeout_s=1)
    assert not error and said.startswith("started\n") and "[timed out after 1 s" in said
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).startswith(f"sleep {mark}")]
    for pid in leftovers:  # (only where the test fails) ours: never left running
        os.kill(int(pid), 9)
    assert leftovers == []  # the whole group was killed, the backgrounded sleep too


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def test_shell_timeout_is_capped_by_the_server_and_output_by_the_limit(served):
    shell = served("shell_server.py", "--timeout", "1", "--output-limit", "1000")
    error, said = shell.call("shell", command="sleep 30", timeout_s=600)
    assert "[timed out after 1 s" in said
    error, said = shell.call("shell", command="seq 1 100000")
    body = said.removeprefix("[... earlier output cut]\n")
    assert said.startswith("[... earlier output cut]\n") and body.endswith("99999\n100000\n[exit code 0]")
    assert len(body) <= 1000 + len("[exit code 0]") + 1


# ---- search --------------------------------------------------------------------------------------------


def test_search_over_a_kv_search_corpus_answers_as_the_suites_own_tools(served, tmp_path):
    from forge_cli.tasks import kvsearch

    suite = kvsearch.kv_search_suite()
    task = next(t for t in suite.make("train", 20, 3) if int(t.meta["hops"]) >= 2)
    corpus = kvsearch.corpus_of(task)
    folder = tmp_path / "root" / ".forge-corpus"
    folder.mkdir()
    for doc in corpus.documents:
        (folder / f"{doc.id}.txt").write_text(doc.text)
    search = served("search_server.py", "--corpus", ".forge-corpus")
    assert set(search.tools) == {"search", "open"}
    own = {tool.name: tool for tool in suite.tools(task, tmp_path)}
    for entity in corpus.chain:
        error, said = search.call("search", query=entity)
        expected = own["search"].run({"query": entity})
        assert not error and said.split("\n\n")[0] == expected.split("\n\n")[0]  # the same best hit, said the same way
        doc = corpus.by_entity(entity)
        assert search.call("open", doc_id=doc.id) == (False, own["open"].run({"doc_id": doc.id}))
    assert search.call("search", query="zzzz qqqq") == (False, "no documents match")
    error, said = search.call("open", doc_id="doc-nope")
    assert error and "there is no document 'doc-nope'" in said


def test_search_over_the_work_directory_skips_hidden_files(served, tmp_path):
    root = tmp_path / "root"
    (root / "notes").mkdir()
    (root / "notes" / "plan.txt").write_text("Harbor plan\nthe lantern festival moves to the harbor\n")
    (root / "other.md").write_text("Other\nnothing here\n")
    (root / ".hidden.txt").write_text("Harbor secrets\n")
    search = served("search_server.py")
    error, said = search.call("search", query="harbor")
    assert not error and said == "notes/plan: Harbor plan\nthe lantern festival moves to the harbor ..."
    assert search.call("open", doc_id="notes/plan")[1].startswith("notes/plan\nHarbor plan")
