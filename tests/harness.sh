# Sourced by the end-to-end shell tests (cli_test.sh, serve_test.sh, serve_signal_test.sh,
# tpbench_test.sh): MPI settings for a 2-core CI machine, a scratch directory, PASS/FAIL
# counting and waiting for a server's /health.
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe --allow-run-as-root)
WORK=$(mktemp -d)
pass=0
fail=0
ok() { echo "PASS: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
# The tally; the script's exit status when it is the last command.
finish() { echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; }
# wait_healthy PORT: up to 2 minutes for http://127.0.0.1:PORT/health to answer 200.
wait_healthy() {
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}
