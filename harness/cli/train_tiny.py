"""``evalrun train-tiny``: retrain the shipped tiny model from its recipe and, with
``--compare``, compare the weights with the shipped checkpoint."""

from __future__ import annotations

import argparse
import json
import sys
import time

import harness.models.tiny as tm
from harness.config.types import OptionalPath, cli_type
from harness.models.shipped import SHIPPED_DIR, compare_checkpoints
from harness.models.training import export_checkpoint, train_model
from harness.models.training_recipe import DEFAULT_TRAINED_NAME, TRAINED_MODELS, TrainingError, trained_recipe_hash


def cli_main(argv: list[str]) -> int:
    """``evalrun train-tiny [--name NAME] [--output DIR] [--compare]``: retrain from the recipe.

    Trains the named model from its recipe (never reusing the shipped checkpoint or
    a cached folder) into ``--output`` (default: a new folder under the cache) and,
    with ``--compare``, compares the result with the shipped checkpoint
    (:func:`compare_checkpoints`). Exit 0 when trained (and, with ``--compare``,
    bit-identical), 1 when the weights differ, 2 on errors.
    """
    p = argparse.ArgumentParser(prog="evalrun train-tiny", description=(
        "Retrain evalrun's tiny Qwen3-Next + MTP model from its recipe (about 5 minutes on two "
        "idle cores, up to 20 on busy ones). The checkpoint ships with evalrun, so runs never need this."))
    p.add_argument("--name", default=DEFAULT_TRAINED_NAME, choices=sorted(TRAINED_MODELS))
    p.add_argument("--output", type=cli_type(OptionalPath, "a folder"), default=None,
                   help="folder to write (must not exist; default: <cache>/retrain/<name>-<hash>-<time>)")
    p.add_argument("--compare", action="store_true", help="compare with the shipped checkpoint")
    args = p.parse_args(argv)
    recipe = TRAINED_MODELS[args.name]
    out = args.output or (tm.default_cache_dir() / "retrain" /
                          f"{args.name}-{trained_recipe_hash(recipe)[:12]}-{time.strftime('%Y%m%dT%H%M%S')}")
    if out.exists():
        print(f"evalrun train-tiny: {out} exists; choose another --output", file=sys.stderr)
        return 2
    try:
        model, mtp, _, _, log = train_model(recipe, print)
        out.parent.mkdir(parents=True, exist_ok=True)
        export_checkpoint(model, mtp, recipe, out)
        tm.write_json(out / "train_log.json", log)
    except TrainingError as e:
        print(f"evalrun train-tiny: {e}", file=sys.stderr)
        return 2
    print(f"trained {args.name} in {log['seconds']:.0f} s into {out}")
    if not args.compare:
        return 0
    shipped = SHIPPED_DIR / args.name
    cmp = compare_checkpoints(shipped, out)
    print(json.dumps({"shipped": str(shipped), "retrained": str(out), **cmp}, indent=2))
    return 0 if cmp["identical"] else 1
