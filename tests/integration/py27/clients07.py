"""Real third-party Kafka 0.7 clients against twlog, run under Python 2.7 by test_third_party07.py.

The clients are used exactly as their READMEs show, unmodified:
  - samsa 0.3.11 (Disqus; ZooKeeper-aware: finds brokers and partitions in
    ZooKeeper through kazoo, balances consumer groups with 0.7's paths);
  - brod 0.4.3 (Datadog; its blocking client, which talks to one broker).

Usage: python2.7 clients07.py LIBDIR COMMAND ARGS...
  samsa-produce ZK TOPIC LISTS SIZE      publish LISTS lists of SIZE messages "<topic>-<list>-<i>"
  samsa-consume ZK TOPIC GROUP MEMBERS IDLE_S TIMEOUT_S
                                         join GROUP, wait until it has MEMBERS members, read until no
                                         message came for IDLE_S seconds, wait until every member has
                                         stopped reading, commit, report what it read and owned
  brod HOST PORT TOPIC                   produce to partitions 0 and 1, read back offsets and messages
  brod-fetch HOST PORT TOPIC PARTITION OFFSET   the messages from OFFSET, as [offset, payload] pairs

Each command prints one JSON object on its last line of stdout; every wait is bounded.
Written to parse as Python 3 as well (the repository's tools read every .py file).
"""

from __future__ import print_function

import json
import logging
import os
import sys
import time

sys.path.insert(0, sys.argv[1])
logging.basicConfig(level=getattr(logging, os.environ.get("CLIENTS07_LOG", "WARNING")), stream=sys.stderr,
                    format="%(relativeCreated)d %(threadName)s %(name)s %(message)s")

from kazoo.client import KazooClient  # noqa: E402  (after the library directory is on the path)


def samsa_cluster(zk_hosts):
    from samsa.cluster import Cluster

    zookeeper = KazooClient(hosts=zk_hosts)
    zookeeper.start(timeout=15)
    return zookeeper, Cluster(zookeeper)


def samsa_produce(zk_hosts, topic_name, lists, size):
    zookeeper, cluster = samsa_cluster(zk_hosts)
    topic = cluster.topics[topic_name]
    brokers = sorted(cluster.brokers.keys())
    for n in range(int(lists)):
        topic.publish(["%s-%d-%d" % (topic_name, n, i) for i in range(int(size))])
    zookeeper.stop()
    return {"brokers": brokers, "published": int(lists) * int(size)}


def samsa_consume(zk_hosts, topic_name, group, members, idle_s, timeout_s):
    zookeeper, cluster = samsa_cluster(zk_hosts)
    deadline = time.time() + float(timeout_s)
    consumer = cluster.topics[topic_name].subscribe(group)
    ids_path = "/consumers/%s/ids" % group
    while len(zookeeper.get_children(ids_path)) < int(members):
        if time.time() > deadline:
            raise SystemExit("the group never had %s members" % members)
        time.sleep(0.1)
    messages = []
    last = time.time()
    while time.time() - last < float(idle_s) and time.time() < deadline:
        message = consumer.next_message(timeout=0.2)
        if message is not None:
            messages.append(message)
            last = time.time()
    # Leave only once every member has stopped reading: a member leaving makes the others take its
    # partitions, and what each owns is reported as it was while they all read.
    barrier = "/clients07-barrier/%s" % group
    zookeeper.create("%s/%s" % (barrier, consumer.id), makepath=True)  # persistent: outlives a member that left
    while len(zookeeper.get_children(barrier)) < int(members):
        if time.time() > deadline:
            raise SystemExit("the other members never stopped reading")
        time.sleep(0.1)
    owned = sorted("%s-%s" % (p.broker.id, p.number) for p in consumer.partitions)
    consumer.commit_offsets()
    zookeeper.stop()
    return {"messages": messages, "owned": owned}


def brod(host, port, topic):
    from brod.blocking import Kafka

    kafka = Kafka(host, int(port))
    kafka.produce(topic, ["brod-0", "brod-1", "x" * 1000], partition=0)
    kafka.produce(topic, ["brod-p1"], partition=1)
    deadline = time.time() + 15
    while kafka.offsets(topic, -1, 1, partition=0)[0] == 0 or kafka.offsets(topic, -1, 1, partition=1)[0] == 0:
        if time.time() > deadline:
            raise SystemExit("brod's messages never became visible")
        time.sleep(0.05)
    return {
        "latest": [kafka.offsets(topic, -1, 5, partition=p) for p in (0, 1)],
        "earliest": [kafka.offsets(topic, -2, 1, partition=p) for p in (0, 1)],
        "partition0": [[offset, payload] for offset, payload in kafka.fetch(topic, 0, partition=0, max_size=65536)],
        "partition1": [[offset, payload] for offset, payload in kafka.fetch(topic, 0, partition=1, max_size=65536)],
    }


def brod_fetch(host, port, topic, partition, offset):
    from brod.blocking import Kafka

    fetched = Kafka(host, int(port)).fetch(topic, int(offset), partition=int(partition), max_size=65536)
    return {"messages": [[o, payload] for o, payload in fetched]}


COMMANDS = {"samsa-produce": samsa_produce, "samsa-consume": samsa_consume, "brod": brod, "brod-fetch": brod_fetch}

if __name__ == "__main__":
    result = COMMANDS[sys.argv[2]](*sys.argv[3:])
    print(json.dumps(result, sort_keys=True))
