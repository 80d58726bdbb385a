"""Loading one config: errors that name file, key, line and nearest key."""

from __future__ import annotations

import pytest

from harness.config.loader import load_config
from harness.config.schema import ConfigError
from tests.config.texts import NATIVE, write


def test_unknown_key_names_file_line_and_nearest(tmp_path):
    p = write(tmp_path, "bad.yaml", "model_name: a\naccuracy_treshold: 0.9\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert f"{p}:2" in msg
    assert "accuracy_treshold" in msg and "did you mean 'accuracy_threshold'" in msg


def test_missing_required_key(tmp_path):
    p = write(tmp_path, "bad.yaml", "model_name: a\n")
    with pytest.raises(ConfigError, match="missing required key 'accuracy_threshold'"):
        load_config(p)


def test_wrong_type_names_key_and_line(tmp_path):
    p = write(tmp_path, "bad.yaml", "model_name: a\naccuracy_threshold: 0.5\nnum_questions: many\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert f"{p}:3" in str(e.value) and "num_questions" in str(e.value)


def test_native_unknown_nested_key_suggests(tmp_path):
    p = write(tmp_path, "n.yaml", NATIVE.replace("async_scheduling: false", "async_schedulin: false"))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "variants.spec.async_schedulin" in msg and "did you mean 'async_scheduling'" in msg
    assert f"{p}:8" in msg
