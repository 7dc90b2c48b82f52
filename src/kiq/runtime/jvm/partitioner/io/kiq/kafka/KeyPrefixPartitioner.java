package io.kiq.kafka;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.producer.Partitioner;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.utils.Utils;

/**
 * Puts a composite key ("AAPL|2026-11-22") in the partition of its first part ("AAPL"),
 * hashed exactly as Kafka's default partitioner hashes a whole key: toPositive(murmur2) % n.
 * An entity's rows then share its partition, and a range scan of them reads one partition.
 *
 * <p>Configured per topic: {@code kiq.key.separator.TOPIC = SEP} for each topic whose keys are
 * composite. Other topics, and keys without the separator, hash the whole key, as the default
 * partitioner does. Keyless records (kiq's dead letters) go to partition 0 of their topic, which
 * kiq creates with one partition.
 */
public final class KeyPrefixPartitioner implements Partitioner {
  public static final String SEPARATOR_PREFIX = "kiq.key.separator.";

  private final Map<String, byte[]> separators = new HashMap<>();

  @Override
  public void configure(Map<String, ?> configs) {
    for (Map.Entry<String, ?> e : configs.entrySet()) {
      if (e.getKey().startsWith(SEPARATOR_PREFIX) && e.getValue() != null) {
        String topic = e.getKey().substring(SEPARATOR_PREFIX.length());
        byte[] sep = e.getValue().toString().getBytes(StandardCharsets.UTF_8);
        if (sep.length > 0) {
          separators.put(topic, sep);
        }
      }
    }
  }

  @Override
  public int partition(
      String topic, Object key, byte[] keyBytes, Object value, byte[] valueBytes, Cluster cluster) {
    int partitions = cluster.partitionsForTopic(topic).size();
    if (keyBytes == null) {
      return 0;
    }
    byte[] sep = separators.get(topic);
    int end = sep == null ? keyBytes.length : indexOf(keyBytes, sep);
    return Utils.toPositive(murmur2(keyBytes, end)) % partitions;
  }

  /** Where {@code sep} first starts in {@code key}, or the key's length. */
  static int indexOf(byte[] key, byte[] sep) {
    outer:
    for (int i = 0; i + sep.length <= key.length; i++) {
      for (int j = 0; j < sep.length; j++) {
        if (key[i + j] != sep[j]) {
          continue outer;
        }
      }
      return i;
    }
    return key.length;
  }

  /** Kafka's murmur2 (Utils.murmur2) over the first {@code length} bytes, without a copy. */
  static int murmur2(byte[] data, int length) {
    final int seed = 0x9747b28c;
    final int m = 0x5bd1e995;
    final int r = 24;
    int h = seed ^ length;
    int length4 = length / 4;
    for (int i = 0; i < length4; i++) {
      final int i4 = i * 4;
      int k =
          (data[i4] & 0xff)
              + ((data[i4 + 1] & 0xff) << 8)
              + ((data[i4 + 2] & 0xff) << 16)
              + ((data[i4 + 3] & 0xff) << 24);
      k *= m;
      k ^= k >>> r;
      k *= m;
      h *= m;
      h ^= k;
    }
    switch (length % 4) {
      case 3:
        h ^= (data[(length & ~3) + 2] & 0xff) << 16;
      case 2:
        h ^= (data[(length & ~3) + 1] & 0xff) << 8;
      case 1:
        h ^= data[length & ~3] & 0xff;
        h *= m;
    }
    h ^= h >>> 13;
    h *= m;
    h ^= h >>> 15;
    return h;
  }

  @Override
  public void close() {}
}
