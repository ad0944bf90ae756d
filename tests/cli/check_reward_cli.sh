#!/bin/sh
# `rlpost reward` end to end: public-bugs case #7 verbatim through the
# driver (boxed_math, and gsm8k where the reference is a number), the
# output format, and the exit codes. $1 is the rlpost executable.
set -u
rlpost=$1
fails=0

# expect NAME REFERENCE COMPLETION WANT: the exact line printed
expect() {
  got=$(printf '%s' "$3" | "$rlpost" reward "$1" --reference "$2" --options '{"threads": 1}')
  rc=$?
  case "$got" in
    "$4"*) ;;
    *) echo "FAIL: reward $1 --reference '$2' <<< '$3'"; echo "  got:  $got (rc $rc)"; echo "  want: $4..."
       fails=$((fails + 1)) ;;
  esac
}

# case #7, verbatim
expect boxed_math '\frac{1}{3}' 'So the answer is \boxed{\frac{1}{3}}.' '{"score": 1, "valid": true'
expect boxed_math '\frac{1}{3}' 'So the answer is \boxed{\frac{1}{2}}.' '{"score": 0, "valid": true'
expect boxed_math '1000' 'The total is \boxed{1{,}000} dollars.' '{"score": 1, "valid": true'
expect boxed_math '\frac{1}{3}' '\boxed{\frac{1}{3}' '{"score": 0, "valid": true'
expect gsm8k '\frac{1}{3}' 'So the answer is \boxed{\frac{1}{3}}.' '{"score": 1, "valid": true'
expect gsm8k '\frac{1}{3}' 'So the answer is \boxed{\frac{1}{2}}.' '{"score": 0, "valid": true'
expect gsm8k '1000' 'The total is \boxed{1{,}000} dollars.' '{"score": 1, "valid": true'
expect gsm8k '\frac{1}{3}' '\boxed{\frac{1}{3}' '{"score": 0, "valid": true'

# Logic-RL totals, and a sample that cannot be scored
kk='(1) Zoey is a knight
(2) Oliver is a knave'
expect logic_rl "$kk" '<think>x</think><answer>Zoey is a knight, Oliver is a knave</answer>' '{"score": 3, "valid": true'
expect logic_rl "$kk" '<think>x</think><answer>Zoey is a knave, Oliver is a knight</answer>' '{"score": -0.5, "valid": true'
expect logic_rl "$kk" '<answer>Zoey is a knight, Oliver is a knave</answer>' '{"score": -3, "valid": true'
expect logic_rl 'nobody' '<think>x</think><answer>a</answer>' '{"score": null, "valid": false, "reason": "logic_rl: '

# metadata instead of --reference
got=$(printf '<answer>3*5+7</answer>' | "$rlpost" reward countdown --metadata '{"numbers": [3, 5, 7], "target": 22}')
[ "$got" = '{"score": 1, "valid": true, "reason": "correct: equals 22"}' ] || { echo "FAIL countdown: $got"; fails=$((fails + 1)); }

# exit codes: 2 for an unknown built-in, a bad option, no NAME
printf x | "$rlpost" reward no_such_reward >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: unknown name not 2"; fails=$((fails + 1)); }
printf x | "$rlpost" reward gsm8k --options '{"corect": 1}' >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: bad option not 2"; fails=$((fails + 1)); }
"$rlpost" reward </dev/null >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: no name not 2"; fails=$((fails + 1)); }

[ $fails -eq 0 ] && echo "rlpost reward: all checks passed"
exit $fails
