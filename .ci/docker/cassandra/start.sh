#!/bin/sh
# One Cassandra node: the container's address for the cluster, every
# address for clients, fresh data, the same settings as the process route's
# cassandra.yaml (xtask/src/engines/cassandra.rs).
set -eu
ip=$(hostname -i | cut -d' ' -f1)
run=/var/lib/cassandra
mkdir -p "$run/data"
cat >"$run/cassandra.yaml" <<YAML
cluster_name: ${CASSANDRA_CLUSTER_NAME:-xtask}
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: org.apache.cassandra.locator.SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$ip:7000"
listen_address: $ip
rpc_address: 0.0.0.0
broadcast_rpc_address: $ip
storage_port: 7000
start_native_transport: true
native_transport_port: 9042
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
data_file_directories:
  - $run/data/data
commitlog_directory: $run/data/commitlog
hints_directory: $run/data/hints
saved_caches_directory: $run/data/saved_caches
cdc_raw_directory: $run/data/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 8MiB
disk_access_mode: mmap_index_only
concurrent_reads: 8
concurrent_writes: 16
concurrent_compactors: 1
paxos_variant: v2
cas_contention_timeout: 5000ms
write_request_timeout: 5000ms
read_request_timeout: 5000ms
range_request_timeout: 10000ms
request_timeout: 10000ms
YAML
cat >"$run/logback.xml" <<XML
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
XML
heap=${MAX_HEAP_SIZE:-1G}
jamm=$(ls /opt/cassandra/lib/jamm-*.jar | head -1)
exec java "-Xms$heap" "-Xmx$heap" @/opt/cassandra/jvm.options \
  "-javaagent:$jamm" \
  "-Dcassandra.config=file://$run/cassandra.yaml" \
  "-Dcassandra.storagedir=$run/data" \
  "-Dcassandra.logdir=$run" \
  "-Dlogback.configurationFile=$run/logback.xml" \
  -cp '/opt/cassandra/lib/*' org.apache.cassandra.service.CassandraDaemon
