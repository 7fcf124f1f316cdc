"""Config names the new table dispatches that neither the base table nor the instantiated/heuristic
lists held (so no GPU test or sanitizer run has seen them): argv = BASE NEW, prints comma list."""
import json, sys
from marlin_cupy.config import INSTANTIATED, SM90_INSTANTIATED
base, new = (json.load(open(p)) for p in sys.argv[1:3])
known = {c.name for c in INSTANTIATED} | {c.name for c in SM90_INSTANTIATED} | {e["config"] for e in base["entries"]}
print(",".join(sorted({e["config"] for e in new["entries"]} - known)))
