S=69ff6c2 L=call2 PART=2 bash benchmarks/results/2026-12-05_chain_early_prep/lever_d_call.sh
