#!/bin/sh
# The layers of lib/ point one way: each folder may include its own
# headers and those of the folders listed for it below (lower layers), and
# nothing else. Fails naming every include that points upwards or
# sideways. Usage: check_layers.sh SOURCE_ROOT
set -u
lib=$1/lib
allowed() {  # folder -> the folders it may include
  case $1 in
    core) echo "" ;;
    backend) echo "core" ;;
    optim | dist) echo "core backend" ;;
    model) echo "core backend optim dist" ;;
    algo) echo "core backend optim dist model" ;;
    rollout) echo "core backend optim dist model env" ;;
    sync) echo "core backend optim dist model rollout" ;;
    tools) echo "core" ;;
    reward | task) echo "core tools" ;;
    buffer) echo "core" ;;
    env) echo "core tools task reward" ;;
    train) echo "core backend optim dist model algo rollout sync reward task buffer tools env" ;;
    *) echo "?" ;;
  esac
}
bad=0
for dir in "$lib"/*/; do
  d=$(basename "$dir")
  ok=$(allowed "$d")
  [ "$ok" = "?" ] && { echo "lib/$d: a folder with no layer (add it to tests/check_layers.sh and README's layout)"; bad=1; continue; }
  for f in "$dir"*.c "$dir"*.h; do
    [ -f "$f" ] || continue
    for inc in $(sed -n 's|^#include "\([a-z_]*\)/.*|\1|p' "$f" | sort -u); do
      [ "$inc" = "$d" ] && continue
      case " $ok " in
        *" $inc "*) ;;
        *) echo "lib/$d/$(basename "$f") includes $inc/: not below $d"; bad=1 ;;
      esac
    done
  done
done
[ $bad -eq 0 ] && echo "layers point one way"
exit $bad
