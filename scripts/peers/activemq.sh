#!/bin/sh
# Start or stop an ActiveMQ broker on 127.0.0.1 for `twlog bench compare`, its data in a scratch directory.
#
#   scripts/peers/activemq.sh start [DIR]   # STOMP on 127.0.0.1:61613 (ACTIVEMQ_STOMP_PORT), data under DIR
#   scripts/peers/activemq.sh stop [DIR]    # SIGTERM to the PID it started
#   scripts/peers/activemq.sh status [DIR]
#
# DIR defaults to ${TWLOG_PEERS_DIR:-/tmp/twlog-peers}/activemq. Needs Debian's activemq package
# (apt-get install -y activemq) and Java; the system service is not used. KahaDB flushes its journal
# periodically (journalDiskSyncStrategy="periodic"): the paper's asynchronous flush. Every wait is bounded.
set -eu

action=${1:-}
dir=${2:-${TWLOG_PEERS_DIR:-/tmp/twlog-peers}/activemq}
port=${ACTIVEMQ_STOMP_PORT:-61613}
home=/usr/share/activemq

usage() { echo "usage: $0 start|stop|status [DIR]" >&2; exit 2; }

listening() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

alive() { [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; }

wait_gone() {  # wait_gone PID SECONDS: poll until the process has ended, bounded
    i=0
    while kill -0 "$1" 2>/dev/null && [ "$i" -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
    ! kill -0 "$1" 2>/dev/null
}

start() {
    [ -f "$home/bin/activemq.jar" ] || { echo "activemq.sh: $home/bin/activemq.jar not found; apt-get install -y activemq" >&2; exit 1; }
    command -v java > /dev/null || { echo "activemq.sh: java not found" >&2; exit 1; }
    if alive; then echo "activemq.sh: already running as pid $(cat "$dir/pid") ($dir)"; exit 0; fi
    if listening "$port"; then echo "activemq.sh: 127.0.0.1:$port is taken by another process" >&2; exit 1; fi
    mkdir -p "$dir/conf" "$dir/data"
    cp /etc/activemq/instances-available/main/log4j2.properties "$dir/conf/" 2>/dev/null || true
    cat > "$dir/conf/activemq.xml" <<CONF
<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
       http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="twlog-compare" useJmx="false"
          advisorySupport="false" schedulerSupport="false" dataDirectory="$dir/data">
    <persistenceAdapter>
      <kahaDB directory="$dir/data/kahadb" journalDiskSyncStrategy="periodic"/>
    </persistenceAdapter>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="512 mb"/></memoryUsage>
        <storeUsage><storeUsage limit="20 gb"/></storeUsage>
        <tempUsage><tempUsage limit="5 gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:$port"/>
    </transportConnectors>
  </broker>
</beans>
CONF
    setsid java -Xms1G -Xmx1G --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED \
        --add-opens java.base/java.util.concurrent=ALL-UNNAMED --add-opens java.base/java.net=ALL-UNNAMED \
        -Dactivemq.classpath="$dir/conf" -Dactivemq.home="$home" -Dactivemq.base="$dir" \
        -Dactivemq.conf="$dir/conf" -Dactivemq.data="$dir/data" \
        -jar "$home/bin/activemq.jar" start "xbean:file:$dir/conf/activemq.xml" > "$dir/server.out" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    i=0
    while ! listening "$port"; do
        if ! alive || [ "$i" -ge 120 ]; then
            echo "activemq.sh: ActiveMQ did not start within 60 s; see $dir/server.out" >&2
            stop; exit 1
        fi
        sleep 0.5; i=$((i + 1))
    done
    echo "activemq.sh: ActiveMQ (STOMP) on 127.0.0.1:$port, pid $(cat "$dir/pid"), data under $dir"
}

stop() {
    if [ -f "$dir/pid" ]; then
        pid=$(cat "$dir/pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            wait_gone "$pid" 60 || { echo "activemq.sh: pid $pid still running after 60 s; SIGKILL" >&2
                                     kill -KILL "$pid" 2>/dev/null || true; }
        fi
        rm -f "$dir/pid"
        echo "activemq.sh: stopped pid $pid"
    else
        echo "activemq.sh: not running ($dir/pid absent)"
    fi
}

case "$action" in
    start) start ;;
    stop) stop ;;
    status) if alive; then echo "running, pid $(cat "$dir/pid")"; else echo "not running"; exit 1; fi ;;
    *) usage ;;
esac
