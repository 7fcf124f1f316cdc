"""Session 40: a re-tuned table's entries chosen only among configs whose kernels passed the GPU
tests at f028f3a (that commit's table entries and the sm_90 heuristic's instances), with the
stored keep-within incumbents: python3 dev_s40/restrict.py NEW.json TESTED.json (rewrites NEW)."""
import json
import sys
from pathlib import Path

from marlin_cupy import config, tune
from marlin_cupy.config import KernelConfig

new_path, tested_path = sys.argv[1:3]
table = json.loads(Path(new_path).read_text())
tested_table = json.loads(Path(tested_path).read_text())
tested = {KernelConfig.from_name(e["config"]).compiled for e in tested_table["entries"]}
tested |= {c.compiled for c in config.SM90_INSTANTIATED}
passed_over = set()


def allowed(cfg):
    ok = cfg.compiled in tested
    if not ok:
        passed_over.add(cfg.name)
    return ok


inc, keep = tune.stored_incumbents(table)
table["entries"] = tune.select_entries(table["measurements"], 128, allowed, inc, keep)
table["restricted_to_tested"] = {"tested_table_commit": tested_table.get("git_commit"),
                                 "tested_at": "f028f3a", "passed_over": sorted(passed_over)}
tune.write_table(Path(new_path), table)
print(f"{len(table['entries'])} entries; passed over (untested kernels): {sorted(passed_over)}")
