#!/bin/sh
# The chatfmt image's entrypoint: `chatfmt serve` with the arguments the container is given.
#
# PGPASSWORD_FILE names a file (a Docker or Kubernetes secret) holding the PostgreSQL
# password; it is exported as PGPASSWORD, which libpq reads, so the password is neither in
# the --store URL nor in the process's arguments. Everything else is a `chatfmt serve` flag.
set -eu
if [ -n "${PGPASSWORD_FILE:-}" ]; then
  PGPASSWORD=$(cat "$PGPASSWORD_FILE")
  export PGPASSWORD
  unset PGPASSWORD_FILE
fi
exec chatfmt serve "$@"
