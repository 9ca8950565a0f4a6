import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.errors.TopicAuthorizationException;

/**
 * A KIP-848 consumer application that keeps polling after its subscription is refused, as a service
 * that logs and retries would (kafka-console-consumer.sh exits at the first refusal instead).
 * Arguments: bootstrap topic group millis. Prints "records=N refused=M" at the end.
 */
public class RefusedConsumer {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        props.put("group.protocol", "consumer");
        props.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        props.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        long end = System.currentTimeMillis() + Long.parseLong(args[3]);
        int refused = 0, records = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[1]));
            while (System.currentTimeMillis() < end) {
                try {
                    records += consumer.poll(Duration.ofMillis(200)).count();
                } catch (TopicAuthorizationException e) {
                    refused++;
                }
            }
        }
        System.out.println("records=" + records + " refused=" + refused);
    }
}
