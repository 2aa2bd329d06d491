# Sourced by the setup and build scripts: sets PY to $PYTHON, else to the first of python3, python3.13 ... python3.10
# that is Python 3.10 or newer; PY stays empty when none is (the caller says what to do).
PY=""
for cand in ${PYTHON:-python3 python3.13 python3.12 python3.11 python3.10}; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null
  then PY=$cand; break; fi
done
