"""The quality job's flags: every threshold a finite number in its range, refused in one line (exit 2)."""

import pytest

from beam_pipeline.quality import cli


@pytest.mark.parametrize("flags, message", [
    (["--embedding_distance", "nan"], "--embedding_distance must be a number from 0.0 to 2.0, not nan"),
    (["--embedding_distance", "-0.5"], "--embedding_distance must be a number from 0.0 to 2.0"),
    (["--label_error_distance", "5"], "--label_error_distance must be a number from 0.0 to 2.0"),
    (["--embedding_hash_distance", "999"], "--embedding_hash_distance must be a number from 0 to 64"),
    (["--dark_brightness", "inf"], "--dark_brightness must be a number from 0.0 to 255.0"),
    (["--near_constant_contrast", "-1"], "--near_constant_contrast must be a number from 0.0 to 255.0"),
    (["--blur_variance", "nan"], "--blur_variance must be a number at least 0.0"),
    (["--dark_brightness", "200", "--bright_brightness", "10"], "must be below --bright_brightness"),
    (["--hash_distance", "65"], "--hash_distance must be a number from 0 to 64"),
    (["--hash_band_step", "0"], "--hash_band_step must be a number from 1 to 64"),
    (["--max_bucket", "1"], "--max_bucket must be a number at least 2"),
])
def test_a_threshold_out_of_range_is_refused_in_one_line(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args(["--input_dir", str(tmp_path / "job"), "--output_dir", str(tmp_path / "q"), *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_defaults_pass_the_checks(tmp_path):
    config, _ = cli.parse_args(["--input_dir", str(tmp_path / "job"), "--output_dir", str(tmp_path / "q")])
    assert config.hash_distance == 10 and config.dark_brightness < config.bright_brightness
