# Sourced by the CLI tests (not a test itself: CTest runs tests/cli/*.sh only).
# write_two_tensor_trace FILE: two iterations, each with two 5 MiB tensors live together
# (lower bound 10 MiB).
write_two_tensor_trace() {
  {
    echo "stalloc-trace 1"
    for it in 0 1; do
      a=$((it * 2 + 1)); b=$((it * 2 + 2))
      echo "a $a 5242880 0 $it fwd 0 0 0 -"
      echo "a $b 5242880 0 $it fwd 0 0 0 -"
      echo "f $a 5242880 0 $it bwd 0 0 0 -"
      echo "f $b 5242880 0 $it bwd 0 0 0 -"
    done
  } > "$1"
}
