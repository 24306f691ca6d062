R=/work/main/build/default/tools/rangekv
O=/var/tmp/s9cpu
v="--variants distinct,same-prefix"
for round in 1 2; do
  for arm in both e16t64 e16; do
    case $arm in
      both) f="--mode both" ;;
      e16t64) f="--mode embedded --embedded-read-workers 16 --embedded-read-banks 32 --embedded-read-threads 64" ;;
      e16) f="--mode embedded --embedded-read-workers 16 --embedded-read-banks 32" ;;
    esac
    $R bench concurrent --device host --dir /var/tmp $f $v --n 4 --size 1GiB --reps 5 --quiet --json $O/r$round-$arm.json > $O/r$round-$arm.txt 2>$O/r$round-$arm.err
    echo "== r$round $arm ($f)"; grep -E "^(embedded|service) " $O/r$round-$arm.txt | head -4
  done
done
