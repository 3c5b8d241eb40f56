import pytest
from filelock import FileLock

from generation.attempts import RunFailed, salvage
from llm_powertrace_ds import layout


def test_salvage_refuses_a_run_being_measured(tmp_path):
    layout.staging_dir(tmp_path, "r1").mkdir(parents=True)
    with FileLock(str(layout.lock_path(tmp_path, "measure-r1"))), \
            pytest.raises(RunFailed, match="being measured"):
        salvage(tmp_path, "r1")
    assert layout.staging_dir(tmp_path, "r1").is_dir()
