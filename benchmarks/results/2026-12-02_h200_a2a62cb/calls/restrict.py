"""Session 35: a re-tuned table's entries chosen only among configs whose kernels passed the GPU
tests at a5f5ba7 (that commit's table entries and the sm_90 heuristic's instances), with the
stored keep-within incumbents: python3 dev_s35/restrict.py NEW.json TESTED.json (rewrites NEW)."""
import json
import sys
from pathlib import Path

from marlin_cupy import config, tune
from marlin_cupy.config import KernelConfig

new, tested_table = sys.argv[1:3]
t = json.loads(Path(new).read_text())
old = json.loads(Path(tested_table).read_text())
tested = {KernelConfig.from_name(e["config"]).compiled for e in old["entries"]} | \
    {c.compiled for c in config.SM90_INSTANTIATED}
passed_over = set()


def allowed(cfg):
    if cfg.compiled not in tested:
        passed_over.add(cfg.name)
        return False
    return True


inc, keep = tune.stored_incumbents(t)
t["entries"] = tune.select_entries(t["measurements"], 128, allowed, inc, keep)
t["restricted_to_tested"] = {"tested_table_commit": old.get("git_commit"),
                             "passed_over": sorted(passed_over)}
tune.write_table(Path(new), t)
print(f"{len(t['entries'])} entries; passed over (untested kernels): {sorted(passed_over)}")
