#!/usr/bin/env bash
# A throw-away local ZooKeeper for tests and run_local.sh --coordination=zk.
#
#   scripts/zk.sh start DIR [TICK_MS]   writes DIR/zoo.cfg (its own dataDir, a free
#                                       clientPort, admin server off), starts Debian's
#                                       zookeeper, waits until it answers, and prints
#                                       HOST:PORT (also in DIR/zk.hostport)
#   scripts/zk.sh stop DIR              stops it (SIGTERM, then SIGKILL) and waits
#
# Needs java and the zookeeper package (scripts/install_deps.sh). Exit code 3
# when either is missing, so callers can skip with that reason.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR [TICK_MS]" >&2; exit 2; }
[ $# -ge 2 ] || usage
CMD=$1
DIR=$2
TICK=${3:-200}
JAR=/usr/share/java/zookeeper.jar

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# ruok through bash's /dev/tcp: answers imok once the server serves.
answers() {
  local reply
  reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'ruok' >&3 && timeout 2 cat <&3) 2>/dev/null || true)
  [ "$reply" = imok ]
}

case "$CMD" in
  start)
    command -v java >/dev/null 2>&1 || { echo "zk.sh: java is not installed (scripts/install_deps.sh)" >&2; exit 3; }
    [ -r "$JAR" ] || { echo "zk.sh: $JAR missing: the zookeeper package is not installed (scripts/install_deps.sh)" >&2; exit 3; }
    mkdir -p "$DIR/data"
    DIR=$(cd "$DIR" && pwd)
    PORT=$(free_port)
    cat > "$DIR/zoo.cfg" <<CFG
tickTime=$TICK
initLimit=10
syncLimit=5
dataDir=$DIR/data
clientPort=$PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,stat
minSessionTimeout=$((TICK * 2))
maxSessionTimeout=60000
CFG
    cat > "$DIR/log4j.properties" <<CFG
log4j.rootLogger=WARN, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=$DIR/zookeeper.log
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d %p %c{1}: %m%n
CFG
    CP="$DIR:$JAR"
    for j in slf4j-api log4j-1.2 slf4j-log4j12 netty-handler netty-common netty-buffer \
             netty-transport netty-resolver netty-codec netty-transport-native-epoll \
             netty-transport-native-unix-common jline metrics-core commons-cli \
             snappy-java audience-annotations jute zookeeper-jute; do
      [ -r "/usr/share/java/$j.jar" ] && CP="$CP:/usr/share/java/$j.jar"
    done
    # Its own session: a caller that kills its process group (a test's
    # RunCommand) does not take ZooKeeper with it; `stop` does.
    setsid nohup java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dzookeeper.jmx.log4j.disable=true \
      -Dlog4j.configuration="file:$DIR/log4j.properties" -cp "$CP" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$DIR/zoo.cfg" \
      > "$DIR/zookeeper.out" 2>&1 < /dev/null &
    echo $! > "$DIR/zk.pid"
    for _ in $(seq 1 300); do
      if answers "$PORT"; then
        echo "127.0.0.1:$PORT" > "$DIR/zk.hostport"
        echo "127.0.0.1:$PORT"
        exit 0
      fi
      if ! kill -0 "$(cat "$DIR/zk.pid")" 2>/dev/null; then
        echo "zk.sh: zookeeper exited at start-up: $(tail -n 5 "$DIR/zookeeper.out")" >&2
        exit 1
      fi
      sleep 0.1
    done
    echo "zk.sh: zookeeper did not answer on 127.0.0.1:$PORT within 30 s" >&2
    kill "$(cat "$DIR/zk.pid")" 2>/dev/null || true
    exit 1
    ;;
  stop)
    [ -f "$DIR/zk.pid" ] || exit 0
    PID=$(cat "$DIR/zk.pid")
    kill "$PID" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$PID" 2>/dev/null || { rm -f "$DIR/zk.pid"; exit 0; }
      sleep 0.1
    done
    kill -9 "$PID" 2>/dev/null || true
    rm -f "$DIR/zk.pid"
    ;;
  *) usage ;;
esac
