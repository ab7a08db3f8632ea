#!/bin/sh
# Start or stop a RabbitMQ broker on 127.0.0.1 for `twlog bench compare`, its data in a scratch directory.
#
#   scripts/peers/rabbitmq.sh start [DIR]   # AMQP on 127.0.0.1:5672 (RABBITMQ_PORT), data under DIR
#   scripts/peers/rabbitmq.sh stop [DIR]    # SIGTERM to the PID it started (and to the epmd it started)
#   scripts/peers/rabbitmq.sh status [DIR]
#
# DIR defaults to ${TWLOG_PEERS_DIR:-/tmp/twlog-peers}/rabbitmq. Needs Debian's rabbitmq-server package
# (apt-get install -y rabbitmq-server); the system service is not used. Every wait is bounded.
set -eu

action=${1:-}
dir=${2:-${TWLOG_PEERS_DIR:-/tmp/twlog-peers}/rabbitmq}
port=${RABBITMQ_PORT:-5672}
dist_port=${RABBITMQ_DIST_PORT:-25672}
server=/usr/lib/rabbitmq/bin/rabbitmq-server

usage() { echo "usage: $0 start|stop|status [DIR]" >&2; exit 2; }

listening() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

alive() { [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; }

wait_gone() {  # wait_gone PID SECONDS: poll until the process has ended, bounded
    i=0
    while kill -0 "$1" 2>/dev/null && [ "$i" -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
    ! kill -0 "$1" 2>/dev/null
}

start() {
    [ -x "$server" ] || { echo "rabbitmq.sh: $server not found; apt-get install -y rabbitmq-server" >&2; exit 1; }
    if alive; then echo "rabbitmq.sh: already running as pid $(cat "$dir/pid") ($dir)"; exit 0; fi
    if listening "$port"; then echo "rabbitmq.sh: 127.0.0.1:$port is taken by another process" >&2; exit 1; fi
    mkdir -p "$dir/mnesia" "$dir/log"
    cat > "$dir/rabbitmq.conf" <<CONF
listeners.tcp.1 = 127.0.0.1:$port
loopback_users.guest = true
log.file.level = warning
CONF
    echo '[].' > "$dir/enabled_plugins"
    : > "$dir/rabbitmq-env.conf"
    epmd_before=$(pgrep -x epmd || true)
    # HOME holds the Erlang cookie; ERL_EPMD_ADDRESS and inet_dist_use_interface keep epmd and
    # Erlang distribution on loopback.
    env HOME="$dir" RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" RABBITMQ_NODENAME=twlog-compare@localhost \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$dist_port" \
        ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
        RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" RABBITMQ_MNESIA_BASE="$dir/mnesia" \
        RABBITMQ_LOG_BASE="$dir/log" RABBITMQ_PID_FILE="$dir/beam.pid" \
        setsid "$server" > "$dir/server.out" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    i=0
    while ! listening "$port"; do
        if ! alive || [ "$i" -ge 120 ]; then
            echo "rabbitmq.sh: RabbitMQ did not start within 60 s; see $dir/server.out and $dir/log" >&2
            stop; exit 1
        fi
        sleep 0.5; i=$((i + 1))
    done
    if [ -z "$epmd_before" ]; then pgrep -x epmd > "$dir/epmd.pid" || true; fi
    echo "rabbitmq.sh: RabbitMQ on 127.0.0.1:$port, pid $(cat "$dir/pid"), data under $dir"
}

stop() {
    if [ -f "$dir/pid" ]; then
        pid=$(cat "$dir/pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            wait_gone "$pid" 60 || { echo "rabbitmq.sh: pid $pid still running after 60 s; SIGKILL" >&2
                                     kill -KILL "$pid" 2>/dev/null || true; }
        fi
        # The Erlang VM the script started, if the script did not take it down with it.
        if [ -f "$dir/beam.pid" ]; then
            beam=$(cat "$dir/beam.pid")
            if kill -0 "$beam" 2>/dev/null; then kill -TERM "$beam"; wait_gone "$beam" 30 || true; fi
            rm -f "$dir/beam.pid"
        fi
        rm -f "$dir/pid"
        echo "rabbitmq.sh: stopped pid $pid"
    else
        echo "rabbitmq.sh: not running ($dir/pid absent)"
    fi
    if [ -f "$dir/epmd.pid" ]; then  # only an epmd this script started
        for e in $(cat "$dir/epmd.pid"); do kill -TERM "$e" 2>/dev/null || true; done
        rm -f "$dir/epmd.pid"
    fi
}

case "$action" in
    start) start ;;
    stop) stop ;;
    status) if alive; then echo "running, pid $(cat "$dir/pid")"; else echo "not running"; exit 1; fi ;;
    *) usage ;;
esac
