#!/usr/bin/env bash
# Run the shared proxy-overhead yardstick (../shared/bench) with kgate as two extra targets:
#   kgate         passthrough (no filters): the proxy's own cost
#   kgate-policy  the name-needing topic-policy filter on Produce and Fetch (warm id cache)
#   kgate-authz   the authorizer, every request checked and allowed (five rules, default deny)
# Ratios are against a direct connection measured in the same run. Extra args go to run.py,
# e.g.  bench/yardstick.sh --quick   or   bench/yardstick.sh --reps 5 --nice -10
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
YARDSTICK=../shared/bench/run.py
[ -f "$YARDSTICK" ] || { echo "bench/yardstick.sh: $YARDSTICK not found (it lives beside the repository)" >&2; exit 2; }
exec "$PY" "$YARDSTICK" \
  --targets direct,python-relay,kgate,kgate-policy,kgate-authz \
  --extra-name kgate --extra '{python} -m kgate --listen {listen} --upstream {upstream}' \
  --extra-name kgate-policy \
  --extra "{python} -m kgate --listen {listen} --upstream {upstream} --filter 'topic-policy={{\"deny\":[\"secret-*\"]}}'" \
  --extra-name kgate-authz \
  --extra "{python} -m kgate --listen {listen} --upstream {upstream} --filter 'authorizer={{\"default\":\"deny\",\"rules\":[{{\"allow\":\"all\",\"topic\":\"*\"}},{{\"allow\":\"all\",\"group\":\"*\"}},{{\"allow\":\"all\",\"transactional_id\":\"*\"}},{{\"allow\":\"all\",\"cluster\":true}},{{\"deny\":\"all\",\"topic\":{{\"glob\":\"secret-*\"}}}}]}}'" \
  "$@"
