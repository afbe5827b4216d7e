"""``electra-build-corpus``'s command line: the flags generated from ``CorpusJob`` keep every
earlier flag name and the config keys each sets; a config error is one line before anything starts."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli.build_corpus import build_parser, flow_parameters
from pipelines.corpus_job import job_from_args

ROOT = Path(__file__).resolve().parents[2]
EVERY_FLAG = ["--source", "a", "--source", "b", "--out", "o", "--config", "c.json", "--set", "pack.seq_len=64",
              "--profile", "books", "--language", "fr", "--language", "de", "--tokenizer", "unigram",
              "--vocab-size", "800", "--seq-len", "32", "--no-lowercase", "--validation-fraction", "0.1",
              "--seed", "7", "--decontaminate", "glue", "--ray-address", "auto", "--ray-worker-pip", "req.txt",
              "--keep-cache"]


def test_every_earlier_flag_gives_the_flow_the_same_parameters():
    args = build_parser().parse_args(EVERY_FLAG)
    assert flow_parameters(args) == {
        "source": ["a", "b"], "out": "o", "config": "c.json", "overrides": ["pack.seq_len=64"], "profile": "books",
        "language": ["fr", "de"], "tokenizer": "unigram", "vocab_size": 800, "seq_len": 32, "lowercase": False,
        "validation_fraction": 0.1, "seed": 7, "decontaminate": ["glue"], "ray_address": "auto",
        "ray_worker_pip": "req.txt", "keep_cache": True}
    bare = build_parser().parse_args(["--source", "a", "--out", "o"])
    assert flow_parameters(bare) == {"source": ["a"], "out": "o", "config": None, "overrides": []}


def test_named_flags_set_the_config_keys_they_always_set(tmp_path):
    config = tmp_path / "c.json"
    config.write_text('{"decontaminate": {"paths": ["squad.json"]}, "tokenizer": {"vocab_size": 500}}')
    argv = [a if a != "c.json" else str(config) for a in EVERY_FLAG if a not in ("--set", "pack.seq_len=64")]
    job = job_from_args(build_parser().parse_args(argv))
    cfg = job.config
    assert (job.sources, job.out, job.ray_address, job.ray_worker_pip, job.keep_cache) == \
        (["a", "b"], "o", "auto", "req.txt", True)
    assert (cfg.profile, cfg.language, cfg.filter.language.languages) == ("books", ["fr", "de"], ["fr", "de"])
    assert (cfg.tokenizer.kind, cfg.tokenizer.pretrained, cfg.tokenizer.vocab_size) == ("unigram", None, 800)
    assert (cfg.tokenizer.lowercase, cfg.tokenizer.strip_accents) == (False, False)
    assert (cfg.pack.seq_len, cfg.pack.validation_fraction, cfg.pack.seed, cfg.tokenizer.sample_seed) == \
        (32, 0.1, 7, 7)
    assert cfg.decontaminate.paths == ["squad.json", "glue"]  # added to the file's, not replacing them
    located = job_from_args(build_parser().parse_args(["--source", "a", "--out", "o", "--tokenizer", "hf/model"]))
    assert (located.config.tokenizer.kind, located.config.tokenizer.pretrained) == ("wordpiece", "hf/model")


def test_a_config_error_is_one_line_before_prefect_or_ray_start(tmp_path):
    """No server, no Ray: the strict loader's line, exit 2 (the private server's start-up line
    would name Prefect)."""
    p = subprocess.run([sys.executable, "-m", "cli.build_corpus", "--source", str(tmp_path), "--out",
                        str(tmp_path / "out"), "--set", "pack.seq_len=long"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert p.stderr.strip().splitlines() == [
        "build-corpus: error: corpus config.pack.seq_len: expected int, got 'long'"], p.stderr[-3000:]
    assert "Prefect" not in p.stdout + p.stderr and not (tmp_path / "out").exists()


def test_append_is_a_flow_parameter_and_a_contradicting_one_is_one_line(tmp_path):
    """``--append`` reaches the flow; an append that would change the corpus's sequence length is
    the loader's one line, exit 2, before Prefect or Ray (the corpus: a manifest's config only)."""
    from pipelines import schema

    args = build_parser().parse_args(["--source", "a", "--out", "o", "--append"])
    assert flow_parameters(args) == {"source": ["a"], "out": "o", "config": None, "overrides": [], "append": True}
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    manifest = schema.Manifest(seq_len=64, tokenizer=schema.TokenizerInfo("wordpiece", 900, "0" * 64, True, {}),
                               splits={}, shards=[], config={"pack": {"seq_len": 64}})
    manifest.save(str(corpus))
    p = subprocess.run([sys.executable, "-m", "cli.build_corpus", "--source", str(tmp_path), "--out",
                        str(corpus), "--append", "--seq-len", "128"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert p.stderr.strip().splitlines() == [
        f"build-corpus: error: --append: pack.seq_len=128 but {corpus} was built with 64; an append uses the "
        "corpus's own settings (leave it out, or build a new corpus)"], p.stderr[-3000:]
    assert "Prefect" not in p.stdout + p.stderr
