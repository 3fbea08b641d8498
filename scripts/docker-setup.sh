#!/usr/bin/env bash
# Sets up what the docker sandbox backend needs on a Debian machine, as
# root: the docker.io and debootstrap packages when missing, a Docker
# daemon when none answers (no bridge, no iptables: containers get no
# network), and the local base image rllm-base:<recipe hash> built once
# from Debian's packages (pkg/sandbox/baseimage.recipe) and reused.
# Idempotent: run it again and it only checks. Prints the image's tag last.
#
#   bash scripts/docker-setup.sh
#
# DOCKERD_LOG names the daemon's log when the script starts it
# (default /var/log/rllm-dockerd.log); DEBIAN_MIRROR the mirror debootstrap
# downloads from (default: debootstrap's own).
set -euo pipefail
cd "$(dirname "$0")/.."

recipe=pkg/sandbox/baseimage.recipe
log="${DOCKERD_LOG:-/var/log/rllm-dockerd.log}"

say() { echo "docker-setup: $*" >&2; }
die() { say "$*"; exit 1; }

missing=()
# Some machines have the docker client alone (no daemon): docker.io brings
# both.
{ command -v docker >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1; } || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		die "${missing[*]} missing and this is not root on a Debian-like system; install them (apt-get install ${missing[*]})"
	fi
	say "apt-get install ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The daemon: start one when none answers, and wait (bounded) until it does.
if ! docker info >/dev/null 2>&1; then
	if [ -n "${DOCKER_HOST:-}" ]; then
		die "no Docker daemon answers at DOCKER_HOST=$DOCKER_HOST; start it, or unset DOCKER_HOST to let this script start a local one"
	fi
	[ "$(id -u)" = 0 ] || die "no Docker daemon answers and starting one needs root"
	say "starting dockerd --bridge=none --iptables=false (log: $log)"
	# A session of its own, and no descriptor of ours: the daemon outlives
	# this script without holding a caller's pipes or process group.
	setsid dockerd --bridge=none --iptables=false >"$log" 2>&1 </dev/null &
	pid=$!
	for _ in $(seq 1 60); do
		docker info >/dev/null 2>&1 && break
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 5 "$log" >&2 || true
			die "dockerd exited at start (its log above, whole in $log)"
		fi
		sleep 1
	done
	docker info >/dev/null 2>&1 || die "dockerd started but did not answer within 60 s (see $log)"
fi

# The base image, tagged by the recipe's hash.
hash=$(sha256sum "$recipe" | cut -c1-12)
tag="rllm-base:$hash"
if docker image inspect "$tag" >/dev/null 2>&1; then
	say "$tag is present"
	echo "$tag"
	exit 0
fi
value() { sed -n "s/^$1=//p" "$recipe"; }
suite=$(value SUITE)
variant=$(value VARIANT)
include=$(value INCLUDE)
[ -n "$suite" ] && [ -n "$variant" ] || die "$recipe lacks SUITE= or VARIANT="
[ "$(id -u)" = 0 ] || die "building $tag needs root (debootstrap)"

root=$(mktemp -d /var/tmp/rllm-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
say "debootstrap --variant=$variant --include=$include $suite (about 1-3 minutes)"
if ! debootstrap --variant="$variant" --include="$include" "$suite" "$root" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"} >"$root.log" 2>&1; then
	tail -n 20 "$root.log" >&2
	rm -f "$root.log"
	die "debootstrap failed (the end of its log above)"
fi
rm -f "$root.log"
# Package caches and lists are of no use in the image.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
say "docker import as $tag"
tar -C "$root" -c . | docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV LANG=C.UTF-8' \
	--change "LABEL org.rllm.base-recipe=$hash" \
	--change 'CMD ["/bin/bash"]' \
	- "$tag" >/dev/null
echo "$tag"
