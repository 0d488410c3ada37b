#!/bin/sh
# test_options.sh BIN RESULT — the options table (shim/options.h) against the code and the docs:
#   - the accessors read the environment as options.h says (BIN --check);
#   - doc/shim.md's "Options" table is the table, row for row (BIN --markdown);
#   - every LDSHIM_* name in README.md and doc/*.md is a variable of the table, a name
#     of the public headers, or one of the few variables of a tool or test script (listed
#     below, each checked to be used where it is said to be);
#   - every variable of the table is named outside the generated table, a user's in README.md;
#   - no C file of the shim, the tools or the policy reads an LDSHIM_* variable with getenv.
# Writes "<passed> <failed>" to RESULT.
bin=$1; result=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1${2:+: $2}"; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# 1. accessors (each line of --check is one check)
LDSHIM_STATE=full LDSHIM_REPORT=/tmp/r.json LDSHIM_POLICY=x.policy "$bin" --check > "$tmp/check"; rc=$?
while read -r word what; do
  if [ "$word" = ok ]; then ok "$what"; else bad "$what"; fi
done < "$tmp/check"
if grep -q '^FAIL' "$tmp/check"; then want=1; else want=0; fi
[ -s "$tmp/check" ] && [ $rc -eq $want ] && ok "--check exit status" || bad "--check exit status" "$rc, expected $want"

# 2. doc/shim.md holds the generated table between its markers
"$bin" --markdown > "$tmp/want"
sed -n '/^<!-- options: begin/,/^<!-- options: end/p' doc/shim.md | sed '1d;$d' > "$tmp/have"
if [ -s "$tmp/have" ] && cmp -s "$tmp/want" "$tmp/have"; then ok "doc/shim.md's Options table is the table"
else bad "doc/shim.md's Options table is the table" "regenerate it: $bin --markdown; diff: $(diff "$tmp/want" "$tmp/have" | head -4 | tr '\n' ' ')"; fi

# 3. every LDSHIM_* name in the docs is known
"$bin" --names > "$tmp/names"
# Not variables of the shim: names of the public headers, and variables of tools and scripts.
#   name                   used in
cat > "$tmp/others" <<'LIST'
LDSHIM_AB_BARRIER      bench/apps/serve.py
LDSHIM_GPU             tests/gpu/gpu_present.py
LDSHIM_PRELOAD_PREFIX  tests/gpu/shim/run.sh
LIST
while read -r n where; do
  grep -qw "$n" "$where" 2>/dev/null && ok "$n is used in $where" || bad "$n is used in $where" "stale list entry"
done < "$tmp/others"
unknown=
for n in $(grep -oh 'LDSHIM_[A-Z0-9_]*[A-Z0-9]' README.md doc/*.md | sort -u); do
  grep -qx "$n" "$tmp/names" && continue
  grep -q "^$n " "$tmp/others" && continue
  grep -qw "$n" shim/ldshim.h kernels/ldshim_topology.h && continue
  unknown="$unknown $n"
done
[ -z "$unknown" ] && ok "every LDSHIM_* name in README.md and doc/*.md is known" \
  || bad "every LDSHIM_* name in README.md and doc/*.md is known" "unknown:$unknown"

# 4. every variable is documented outside the generated table; a user's in README.md
sed '/^<!-- options: begin/,/^<!-- options: end/d' doc/shim.md > "$tmp/shim-rest.md"
undoc=; noreadme=
"$bin" --audience > "$tmp/aud"
while read -r n who; do
  # (doc/shim.md would match through its generated table: its other sections count)
  grep -qw "$n" README.md $(ls doc/*.md | grep -v '^doc/shim.md$') "$tmp/shim-rest.md" || undoc="$undoc $n"
  [ "$who" = user ] && ! grep -qw "$n" README.md && noreadme="$noreadme $n"
done < "$tmp/aud"
[ -z "$undoc" ] && ok "every variable is described outside the generated table" || bad "every variable is described outside the generated table" "$undoc"
[ -z "$noreadme" ] && ok "every user variable is in README.md" || bad "every user variable is in README.md" "$noreadme"

# 5. no getenv of an LDSHIM_* variable outside shim/options.c
reads=$(grep -n 'getenv *( *\("LDSHIM_\|LD_MLO_ENV_MARKER\)' shim/*.c tools/*.c policy/*.c 2>/dev/null | grep -v '^shim/options\.c:')
[ -z "$reads" ] && ok "no getenv of LDSHIM_* outside shim/options.c" || bad "no getenv of LDSHIM_* outside shim/options.c" "$reads"

echo "$pass $fail" > "$result"
echo "test-options: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
