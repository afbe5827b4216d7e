"""``electra-build-corpus --tokenizer FOLDER`` with a tokenizer that covers nothing, through the
command line (its own Prefect server, local Ray): one error line and exit 2, naming the folder
and the [UNK] share; with ``--set tokenizer.max_unk_share=1`` the corpus is built, and the run's
closing lines show the share and the one warning, once (the log's WARNING line, the same
record, is the publish's: ``pipelines.orchestration.publish``)."""
from __future__ import annotations

import json

from cli.build_corpus import main
from pipelines import schema
from synthetic import prose
from tests.pipelines.test_tokenizer_coverage import five_token_folder, write_raw


def test_a_tokenizer_that_covers_nothing_is_one_error_line_until_allowed(tmp_path, ray_local, capsys):
    raw = write_raw(tmp_path / "raw", prose.documents(30, seed=2))
    model = five_token_folder(tmp_path / "model")
    (tmp_path / "corpus.json").write_text(json.dumps({"filter": {"blocks": []}, "shard": {"min_shards_per_split": 1}}))
    out = tmp_path / "out"
    argv = ["--source", str(raw), "--out", str(out), "--config", str(tmp_path / "corpus.json"),
            "--tokenizer", f"{model}/", "--seq-len", "64", "--validation-fraction", "0.1", "--seed", "7"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"build-corpus: error: tokenizer.pretrained={model}/: 100.0% of the sample's tokens "
                             "are [UNK] (")
    assert err[0].endswith("this tokenizer does not cover the text (a 5-token vocabulary); use another --tokenizer, "
                           "or allow it with --set tokenizer.max_unk_share=1.00")
    assert not (out / schema.MANIFEST_NAME).exists()

    assert main([*argv, "--set", "tokenizer.max_unk_share=1.00"]) == 0
    printed = capsys.readouterr()
    manifest = schema.Manifest.load(str(out))
    assert manifest.stats["tokenizer"]["unk_share"] == 1.0 and len(manifest.warnings) == 1
    lines = printed.out.splitlines()
    assert [line for line in lines if line.startswith("warning: ")] == [f"warning: {manifest.warnings[0]}"]
    assert any(line.startswith("tokenizer: [UNK] 100.00% of the sample's tokens (train 100.00%, validation 100.00% "
                               "of the examples'), ") for line in lines), lines
