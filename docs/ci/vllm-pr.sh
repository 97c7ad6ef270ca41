#!/usr/bin/env bash
# Did this pull request break vLLM's caches? llm-cache-harness against a vLLM checkout: the
# suites against its real classes (nox -s vllm), then a time-budgeted hunt (nox -s hunt) whose
# report goes to the GitHub step summary and whose reproducers go to
# fixtures/reproducers/found/. Nothing of the checkout is built: its Python files are laid over
# the release's wheel (--vllm-path).
#
#   bash docs/ci/vllm-pr.sh VLLM_CHECKOUT
#
# LCH_RELEASE   the vLLM release your branch is based on (its wheel has the compiled parts;
#               default 0.33.0)
# LCH_BUDGET    the hunt's budget (default 5m)
# LCH_TORCH     the torch nox installs (noxfile.py; on a runner without a local CPU wheel:
#               "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
# NOX_OPTS      extra nox options (e.g. -R to reuse the session's virtualenvs)
# LCH_SUITE_ARGS  extra pytest arguments for the suites (e.g. "-k encoder_cache")
# LCH_HUNT_ARGS   extra hunt arguments (e.g. "--subsystem encoder_cache", "--accept ID")
# Exit status: 0 when the suites passed and the hunt found nothing; else 1.
set -uo pipefail
checkout=$(cd "${1:?usage: vllm-pr.sh VLLM_CHECKOUT}" && pwd) || exit 2
cd "$(dirname "$0")/../.." || exit 2
command -v nox >/dev/null || python -m pip install --quiet nox || exit 2
release=${LCH_RELEASE:-0.33.0}
# shellcheck disable=SC2086  # NOX_OPTS and LCH_SUITE_ARGS are word lists
nox ${NOX_OPTS:-} -s vllm -- --vllm-version "$release" --vllm-path "$checkout" ${LCH_SUITE_ARGS:-}
suites=$?
# shellcheck disable=SC2086
nox ${NOX_OPTS:-} -s hunt -- --vllm-version "$release" --target vllm --vllm-path "$checkout" \
  --budget "${LCH_BUDGET:-5m}" ${LCH_HUNT_ARGS:-}
hunt=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  {
    echo
    if [ "$suites" -eq 0 ]; then echo "Suites against the checkout: passed."
    else echo "Suites against the checkout: FAILED (exit $suites): see the job log."; fi
  } >> "$GITHUB_STEP_SUMMARY"
fi
[ "$suites" -eq 0 ] && [ "$hunt" -eq 0 ]
