"""The importers' metadata files (``importers.meta_files``): reading, limits and scrubbing.

The one-line errors (reason, file and line of each ``InputError``) of an unreadable, non-UTF-8,
oversized, unparsable or non-mapping metadata file; the YAML size limit at its exact boundary and
the line it names; the lines and one-line messages taken from YAML and JSON exceptions; what
``scrub_text`` keeps of a path and which of this machine's names it refuses; the stripping
``scrub_meta`` does; the truncation of ``one_line``/``list_names``/``_short``; file hashes,
family guesses and time zone names.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import socket
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from llm_powertrace_ds.errors import InputError
from llm_powertrace_ds.importers import meta_files
from llm_powertrace_ds.importers.meta_files import (
    _local_identities,
    _parse_error_line,
    _short,
    family_from_name,
    file_sha256,
    list_names,
    load_meta_file,
    one_line,
    read_structured,
    resolve_zone,
    scrub_meta,
    scrub_text,
)

PRIVACY = "; refused (nothing is published that could name a person, a machine or a path)"


def where(info: pytest.ExceptionInfo) -> tuple:
    return info.value.reason, info.value.file, info.value.line, info.value.field


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# ---- file_sha256 --------------------------------------------------------------------------------

def test_sha256_of_a_file_larger_than_one_block(tmp_path):
    data = bytes(range(256)) * 9000  # 2.2 MiB: three 1 MiB blocks
    path = write(tmp_path, "blob.bin", data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    assert file_sha256(write(tmp_path, "empty.bin", b"")) == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("kind,reason", [
    ("missing", "cannot read the file (No such file or directory)"),
    ("folder", "cannot read the file (Is a directory)"),
])
def test_sha256_of_an_unreadable_file(tmp_path, kind, reason):
    path = tmp_path / "nothing.bin" if kind == "missing" else tmp_path
    with pytest.raises(InputError) as info:
        file_sha256(path)
    assert where(info) == (reason, str(path), None, None)


# ---- family_from_name ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,family", [
    (None, "unknown"), ("", "unknown"), ("   ", "unknown"),
    ("Mistral-7B-v0.1", "mistral"), ("Mixtral-8x7B", "mistral"), ("GPT-J-6B", "gptj"),
    ("Llama-3.1-8B", "llama"), ("DeepSeek-LLaMA", "deepseek"), ("gpt2-xl", "gpt2"),
    ("Phi-3-mini", "phi"), ("QWEN2", "qwen"), ("Gemma-2b", "gemma"),
    ("bert-base", "other"), ("graphite", "other"), (0, "other"),
])
def test_family_from_name(name, family):
    assert family_from_name(name) == family


# ---- _local_identities and scrub_text -----------------------------------------------------------

@pytest.mark.parametrize("user,kept", [("annabelle", True), ("abc", True), ("ab", False),
                                       ("root", False)])
def test_local_identities_keep_names_of_three_or_more_but_root(monkeypatch, user, kept):
    monkeypatch.setenv("LOGNAME", user)
    found = _local_identities()
    assert (user in found) is kept
    assert all(isinstance(name, str) and len(name) >= 3 and name != "root" for name in found)


def test_local_identities_skip_a_host_name_that_cannot_be_read(monkeypatch):
    def no_host() -> str:
        raise OSError("no host name")

    monkeypatch.setenv("LOGNAME", "annabelle")
    monkeypatch.setattr(socket, "gethostname", no_host)
    assert _local_identities() == ("annabelle",)


@pytest.fixture
def this_machine(monkeypatch):
    """Fixed user and host names, so no word of the texts below is this machine's own name."""
    monkeypatch.setenv("LOGNAME", "annabelle")
    monkeypatch.setattr(socket, "gethostname", lambda: "pins-host")


@pytest.mark.parametrize("text,kept", [
    ("/home/ann/models/x", "x"),
    ("  /home/ann/models/x  ", "x"),
    ("models/x", "models/x"),
    ("/a/b c/d", "b c/d"),
    ("C:\\Users\\ann\\m.bin", "m.bin"),
    ("\\\\srv\\share\\f", "f"),
    ("//server/share", "share"),
    ("/", None),
    ("~", "~"),
    ("weights from /home/ann/models/llama", "weights from llama"),
    ("weights at C:\\Users\\ann\\m.bin", "weights at m.bin"),
    ("weights at //srv/share", "weights at share"),
    ("x /", "x"),
    ("plain  text ", "plain  text"),
    ("at 10.0.0.1", None),
    ("ann@box", None),
    ("node1.cluster.example.com", None),
])
def test_scrub_text(this_machine, text, kept):
    assert scrub_text(text) == kept


def test_scrub_text_drops_this_machines_user_and_host_name(this_machine):
    assert scrub_text("run by annabelle") is None
    assert scrub_text("run on pins-host") is None
    assert scrub_text("annabelles") == "annabelles"  # a whole word only


# ---- scrub_meta ---------------------------------------------------------------------------------

def test_scrub_meta_strips_text_and_keeps_other_values():
    assert scrub_meta({"method": " lora ", "seed": 3, "tf32": True},
                      source="m.yaml") == {"method": "lora", "seed": 3, "tf32": True}


def test_scrub_meta_refuses_a_path_naming_the_source():
    with pytest.raises(InputError) as info:
        scrub_meta({"method": "/home/ann/lora"}, source="meta/m.yaml")
    assert where(info) == ("value '/home/ann/lora' looks like a file path" + PRIVACY,
                           "meta/m.yaml", None, "method")


# ---- resolve_zone -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [None, "UTC", "utc", "Z", "z", "Etc/UTC", "etc/utc"])
def test_utc_names_are_the_utc_singleton(name):
    assert resolve_zone(name) is dt.timezone.utc


def test_iana_zone():
    assert resolve_zone("America/Phoenix") == ZoneInfo("America/Phoenix")


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "../etc"])
def test_unknown_zone_names_the_value(name):
    with pytest.raises(InputError) as info:
        resolve_zone(name)
    assert where(info) == (f"{name!r} is not an IANA time zone name (e.g. America/Phoenix)",
                           None, None, "tz")


# ---- one_line, list_names, _short ---------------------------------------------------------------

def test_one_line_squeezes_whitespace_and_cuts_at_60():
    assert one_line("a\n  b\t\tc ") == "a b c"
    assert one_line(12) == "12"
    assert one_line("x" * 60) == "x" * 60
    assert one_line("x" * 61) == "x" * 57 + "..."
    assert one_line("a " * 40, 10) == "a a a a..."


def test_list_names():
    assert list_names([]) == "nothing"
    assert list_names(["a", "b c", " d\n"]) == "'a', 'b c', 'd'"
    assert list_names(["n" * 41]) == repr("n" * 37 + "...")
    assert list_names(["n" * 40]) == repr("n" * 40)
    long = list_names([f"column_{i:03d}" for i in range(40)])
    assert len(long) == 200 and long.endswith("...")
    assert long.startswith("'column_000', 'column_001', ")
    assert list_names(["a", "b"], limit=5) == "'a..."


def test_short_reprs_cut_at_40():
    assert _short("x" * 38) == repr("x" * 38)  # 40 characters: kept
    assert _short("x" * 39) == "'" + "x" * 35 + "...'"  # 41: cut to 40
    assert len(_short("x" * 39)) == 40
    assert _short(12.5) == "12.5"
    assert _short("x" * 20, limit=10) == "'xxxxx...'"


# ---- read_structured and load_meta_file ---------------------------------------------------------

def test_yaml_and_json_are_read(tmp_path):
    assert read_structured(write(tmp_path, "m.yaml", "a: 1\nb: [x, 2.5]\n")) == {
        "a": 1, "b": ["x", 2.5]}
    assert read_structured(write(tmp_path, "m.yml", '{"a": null}')) == {"a": None}
    assert read_structured(write(tmp_path, "m.json", '{"a": [1, true]}')) == {"a": [1, True]}
    assert read_structured(str(write(tmp_path, "s.yaml", "- 1\n"))) == [1]
    assert read_structured(write(tmp_path, "e.yaml", "")) is None


def test_byte_order_mark_is_dropped(tmp_path):
    assert read_structured(write(tmp_path, "m.yaml", "\ufeffa: 1\n".encode())) == {"a": 1}
    assert read_structured(write(tmp_path, "m.json", '\ufeff{"a": 1}'.encode())) == {"a": 1}


def test_json_by_suffix_in_any_case(tmp_path):
    path = write(tmp_path, "m.JSON", "a: 1\n")  # YAML text, but the suffix says JSON
    with pytest.raises(InputError) as info:
        read_structured(path)
    assert where(info) == ("not valid JSON: Expecting value", str(path), 1, None)


def test_not_utf8(tmp_path):
    path = write(tmp_path, "m.yaml", b"a: 1\nb: \xff\n")
    with pytest.raises(InputError) as info:
        read_structured(path)
    assert where(info) == ("not UTF-8 text (byte 8)", str(path), 2, None)  # the bad byte's line


@pytest.mark.parametrize("kind,reason", [
    ("missing", "no such file"),
    ("folder", "is a folder, not a regular file; refused"),
])
def test_unreadable_metadata_file(tmp_path, kind, reason):
    path = tmp_path / "m.yaml" if kind == "missing" else tmp_path
    with pytest.raises(InputError) as info:
        read_structured(path)
    assert where(info) == (reason, str(path), None, None)


def test_size_limit_in_characters(tmp_path):
    limit = meta_files.MAX_META_CHARS
    assert limit == 1 << 20
    pad = limit - len('{"a": ""}')
    assert read_structured(write(tmp_path, "ok.json", '{"a": "' + "é" * pad + '"}')) == {
        "a": "é" * pad}  # 2 bytes each: the limit counts characters
    path = write(tmp_path, "big.json", '{"a": "' + "x" * (pad + 1) + '"}')
    with pytest.raises(InputError) as info:
        read_structured(path)
    assert where(info) == (f"the file is {limit + 1} characters; a metadata file is at most "
                           f"{limit}", str(path), 1, None)


@pytest.mark.parametrize("name,text,reason,line", [
    ("a.yaml", "a: 1\nb: [1, 2\n", "not valid YAML: expected ',' or ']', but got '<stream end>'",
     3),
    ("b.yaml", "a: 1\nb: 2\n  c: 3\n", "not valid YAML: mapping values are not allowed here", 3),
    ("c.yaml", "a: 1\nb: *x\n", "not valid YAML: found undefined alias 'x'", 2),
    ("d.yaml", "---\na: 1\n---\nb: 2\n", "not valid YAML: but found another document", 3),
    # a character the YAML reader refuses: no mark, the whole message on one line, line 1
    ("e.yaml", "a: 1\nb: \x07\n", 'not valid YAML: unacceptable character #x0007: special '
     'characters are not allowed in "<unicode string>", position 8', 1),
    # errors of the second pass (constructing values)
    ("f.yaml", "a: 1\nb: 2\n? [1, 2]\n: x\n", "not valid YAML: found unhashable key", 3),
    # a bad value has no mark: line 1 (here also the line that holds it)
    ("g.yaml", "c: !!int x\nb: 2\n",
     "not valid YAML: invalid literal for int() with base 10: 'x'", 1),
    ("h.yaml", "a: 1\nb: !!python/object:os.system x\n", "not valid YAML: could not determine "
     "a constructor for the tag 'tag:yaml.org,2002:python/object:os.system'", 2),
    ("i.json", '{"a": 1,\n "b": }', "not valid JSON: Expecting value", 2),
    ("j.json", '{"a": 1}\n{"b": 2}\n', "not valid JSON: Extra data", 2),
])
def test_unparsable_file_names_the_line(tmp_path, name, text, reason, line):
    path = write(tmp_path, name, text)
    with pytest.raises(InputError) as info:
        read_structured(path)
    assert where(info) == (reason, str(path), line, None)


def test_yaml_size_limit_at_its_boundary(tmp_path, monkeypatch):
    """A mapping (1) with a key (1) and a list (1) of n items: n + 3 values, at most the limit."""
    head = "# size\n# check\nitems:\n"
    monkeypatch.setattr(meta_files, "MAX_META_NODES", 20)
    ok = write(tmp_path, "ok.yaml", head + "".join(f"- {i}\n" for i in range(17)))
    assert read_structured(ok) == {"items": list(range(17))}
    big = write(tmp_path, "big.yaml", head + "".join(f"- {i}\n" for i in range(18)))
    with pytest.raises(InputError) as info:
        read_structured(big)
    assert where(info) == ("the file expands to more than 20 values (YAML aliases?); refused",
                           str(big), 3, None)


def test_yaml_size_limit_is_ten_thousand_values(tmp_path):
    assert meta_files.MAX_META_NODES == 10_000
    big = write(tmp_path, "big.yaml", "# size\n# check\nitems:\n"
                + "".join(f"- {i}\n" for i in range(9998)))
    with pytest.raises(InputError) as info:
        read_structured(big)
    assert where(info) == ("the file expands to more than 10000 values (YAML aliases?); refused",
                           str(big), 3, None)


def test_yaml_alias_bomb_is_refused(tmp_path):
    path = write(tmp_path, "bomb.yaml", "\n".join([
        "a: &a [x, x, x, x, x, x, x, x, x, x]",
        "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]",
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]",
        "d: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]", ""]))
    with pytest.raises(InputError) as info:
        read_structured(path)
    assert where(info) == ("the file expands to more than 10000 values (YAML aliases?); refused",
                           str(path), 1, None)


def test_parse_error_line_falls_back_to_the_context_mark():
    mark = yaml.Mark("m.yaml", 0, 6, 0, None, None)
    assert _parse_error_line(yaml.MarkedYAMLError("while parsing", mark, "oops", None)) == 7
    assert _parse_error_line(yaml.MarkedYAMLError("while parsing", None, "oops", None)) is None
    assert _parse_error_line(json.JSONDecodeError("bad", "a\nb\nc", 4)) == 3


@pytest.mark.parametrize("text,got", [("", "nothing"), ("# only a comment\n", "nothing"),
                                      ("- 1\n", "list"), ("x\n", "str"), ("3\n", "int")])
def test_metadata_must_be_a_mapping(tmp_path, text, got):
    path = write(tmp_path, "m.yaml", text)
    with pytest.raises(InputError) as info:
        load_meta_file(path)
    assert where(info) == (f"expected a mapping of column names to values, got {got}", str(path),
                           1, None)


def test_metadata_keys_become_text(tmp_path):
    assert load_meta_file(write(tmp_path, "m.yaml", "1: a\nseed: 3\nx: null\n")) == {
        "1": "a", "seed": 3, "x": None}
    assert load_meta_file(str(write(tmp_path, "m.json", '{"k": [1]}'))) == {"k": [1]}
