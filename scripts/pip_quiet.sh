# Sourced by scripts/setup.sh: `pip_quiet PYTHON ARGS...` runs `PYTHON -m pip ARGS...` and drops one line
# of its output, pip's
#   WARNING: Location 'file:///…/simple/<package>/' is ignored: it is neither a file nor a directory.
# which pip prints once per package for every local (file://) index of the pip configuration
# (`pip config list`: global.extra-index-url) that has no folder for that package (about 60 lines on a
# fresh set-up where such an index holds only a few packages). pip then reads the other indexes, as it
# should; nothing else is filtered: errors and every other warning still reach stderr, and the exit
# status is pip's. On a machine without such an index the filter matches nothing.
pip_quiet() {
  local py=$1
  shift
  # stderr through the filter, stdout untouched (fd 3); pipefail gives pip's status (sed's is 0)
  { "$py" -m pip "$@" 2>&1 1>&3 3>&- \
      | sed -E "/^WARNING: Location 'file:[^']*' is ignored: it is neither a file nor a directory\.$/d" >&2; } 3>&1
}
