"""Dataset strings from elsewhere never drive the terminal.

One output sanitiser for every CLI table, CSV and card removes terminal escapes and
bidirectional overrides.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc

from llm_powertrace_ds import layout, shards

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"   # a clipboard write
CLEAR = "\x1b[2J\x1b[H"                    # a screen clear
BIDI = "\u202eexe.txt"                      # a right-to-left override


def _hostile_folder(tmp_path, make_run):
    root = tmp_path / "ds"
    run = make_run("r-1")
    shards.publish_run(root, run, refresh_card=False)
    path = next(layout.data_root(root).glob("finetune_runs/*/*.arrow"))
    with pa.OSFile(str(path)) as fh:
        table = ipc.open_stream(fh).read_all()
    i = table.schema.get_field_index("model_family")
    table = table.set_column(i, table.schema.field(i), pa.array([f"llama{OSC52}{CLEAR}{BIDI}"]))
    shards.write_table_atomic(path, table)
    return root


def test_list_strips_terminal_escapes_and_bidi(cli, tmp_path, make_run):
    root = _hostile_folder(tmp_path, make_run)
    for fmt in ("table", "csv", "json"):
        res = cli(["list", root, "--format", fmt])
        assert res.rc == 0
        assert "\x1b" not in res.out and "\x07" not in res.out and "\u202e" not in res.out
        assert "llama" in res.out


def test_safe_text_keeps_newlines_and_plain_text():
    from llm_powertrace_ds.formatting import safe_text

    assert safe_text("a\tb\nc") == "a\tb\nc"
    assert safe_text(f"x{OSC52}y{BIDI}") == "x]52;c;ZWNobyBwd25lZA==yexe.txt"
