// `node client.js ENDPOINT JSON`: the official RocketMQ 5 Node.js client (rocketmq-client-nodejs,
// installed here by `make install`), driven line by line by tests/support/rmq5_clients.py.
//
// JSON: {"role": "producer" | "simple" | "push", "topic": T, "group": G (consumers),
// "tag": expression (default "*"), "await_ms": long polling of a receive (simple; default 5000),
// "check": "commit" | "rollback" (producer: the answer of its transaction checker)}.
// Prints {"started": true} once started, or {"error": "startup: ..."} and ends.
//
// One command per stdin line, one JSON answer per stdout line ({"error": "<class>: <text>"} when
// the command throws):
// - producer {"op": "send", "message": {"body", "tag", "keys", "properties", "message_group",
//   "delay_ms", "transaction": "commit" | "rollback" | "leave"}} -> {"message_id", "offset",
//   "transaction_id"}; the broker's transaction check prints {"checked": id, "topic": t};
// - simple {"op": "receive", "max": n, "invisible_ms": ms} -> {"messages": [message...]};
//   message = {"id", "body", "tag", "keys", "attempt", "topic", "group", "handle",
//   "properties", "delivery_ms"}; the last message received under each id is kept;
//   {"op": "ack", "id"} -> {"acked": id}; {"op": "change", "id", "invisible_ms"} ->
//   {"changed": id, "handle": new};
// - push: prints {"consumed": message} per message its listener gets; it answers SUCCESS, or
//   FAILURE the first time it sees a body starting with "fail";
// - {"op": "quit"}, or stdin closed: shut the client down and end.
// The client's own log goes to stderr.
'use strict';

const readline = require('node:readline');
const {
  Producer,
  SimpleConsumer,
  PushConsumer,
  ConsumeResult,
} = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

function emit(answer) {
  process.stdout.write(JSON.stringify(answer) + '\n');
}

function describeError(err) {
  return `${err && err.constructor ? err.constructor.name : 'Error'}: ${err && err.message}`;
}

const stamp = () => new Date().toISOString();
const logger = {
  info: (...args) => process.stderr.write(`${stamp()} INFO ${args.join(' ')}\n`),
  warn: (...args) => process.stderr.write(`${stamp()} WARN ${args.join(' ')}\n`),
  error: (...args) => process.stderr.write(`${stamp()} ERROR ${args.join(' ')}\n`),
  debug: (...args) => process.stderr.write(`${stamp()} DEBUG ${args.join(' ')}\n`),
  close: () => {},
};

function describe(message) {
  return {
    id: message.messageId,
    body: message.body.toString('utf-8'),
    tag: message.tag ?? null,
    keys: message.keys,
    attempt: message.deliveryAttempt,
    topic: message.topic,
    group: message.messageGroup ?? null,
    handle: message.receiptHandle,
    properties: Object.fromEntries(message.properties),
    delivery_ms: message.deliveryTimestamp ? message.deliveryTimestamp.getTime() : null,
  };
}

function outgoing(topic, spec) {
  const message = { topic, body: Buffer.from(spec.body, 'utf-8') };
  if (spec.tag) message.tag = spec.tag;
  if (spec.keys) message.keys = spec.keys;
  if (spec.properties) message.properties = new Map(Object.entries(spec.properties));
  if (spec.message_group) message.messageGroup = spec.message_group;
  if (spec.delay_ms) message.delay = spec.delay_ms;
  return message;
}

async function producerCommand(producer, request, command) {
  const spec = command.message;
  const message = outgoing(request.topic, spec);
  if (!spec.transaction) {
    const receipt = await producer.send(message);
    return { message_id: receipt.messageId, offset: receipt.offset };
  }
  const transaction = producer.beginTransaction();
  const receipt = await producer.send(message, transaction);
  if (spec.transaction === 'commit') await transaction.commit();
  else if (spec.transaction === 'rollback') await transaction.rollback();
  return { message_id: receipt.messageId, offset: receipt.offset, transaction_id: receipt.transactionId };
}

async function simpleCommand(consumer, kept, command) {
  if (command.op === 'receive') {
    const got = await consumer.receive(command.max, command.invisible_ms);
    for (const message of got) kept.set(message.messageId, message);
    return { messages: got.map(describe) };
  }
  const message = kept.get(command.id);
  if (!message) throw new Error(`no message ${command.id} was received`);
  if (command.op === 'ack') {
    await consumer.ack(message);
    return { acked: command.id };
  }
  if (command.op === 'change') {
    await consumer.changeInvisibleDuration(message, command.invisible_ms);
    return { changed: command.id, handle: message.receiptHandle };
  }
  throw new Error(`unknown op ${command.op}`);
}

function build(endpoint, request) {
  const base = { endpoints: endpoint, namespace: '', logger, requestTimeout: 10000 };
  if (request.role === 'producer') {
    const resolution = request.check === 'rollback' ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
    const checker = {
      async check(message) {
        emit({ checked: message.messageId, topic: message.topic });
        return resolution;
      },
    };
    return new Producer({ ...base, topic: request.topic, checker });
  }
  const subscriptions = new Map([[ request.topic, request.tag ?? '*' ]]);
  if (request.role === 'simple') {
    return new SimpleConsumer({
      ...base, consumerGroup: request.group, subscriptions, awaitDuration: request.await_ms ?? 5000,
    });
  }
  const seen = new Set();
  const messageListener = {
    async consume(message) {
      emit({ consumed: describe(message) });
      const first = !seen.has(message.messageId);
      seen.add(message.messageId);
      if (first && message.body.toString('utf-8').startsWith('fail')) return ConsumeResult.FAILURE;
      return ConsumeResult.SUCCESS;
    },
  };
  return new PushConsumer({ ...base, consumerGroup: request.group, subscriptions, messageListener });
}

async function main() {
  const [ endpoint, requestText ] = process.argv.slice(2);
  const request = JSON.parse(requestText);
  const client = build(endpoint, request);
  try {
    await client.startup();
  } catch (err) {
    emit({ error: `startup: ${describeError(err)}` });
    process.exit(0);
  }
  emit({ started: true });
  const kept = new Map();
  const lines = readline.createInterface({ input: process.stdin });
  // One command at a time, in order: the test waits for each answer before the next.
  for await (const line of lines) {
    if (!line.trim()) continue;
    const command = JSON.parse(line);
    if (command.op === 'quit') break;
    try {
      if (request.role === 'producer') emit(await producerCommand(client, request, command));
      else if (request.role === 'simple') emit(await simpleCommand(client, kept, command));
      else throw new Error('a push consumer takes no commands');
    } catch (err) {
      emit({ error: describeError(err) });
    }
  }
  if (request.role === 'push') {
    // Its shutdown waits for its long polls (up to the broker's 20 s): bounded.
    await Promise.race([ client.shutdown(), new Promise((done) => setTimeout(done, 3000)) ]);
  } else {
    await client.shutdown(); // tells the broker (NotifyClientTermination)
  }
  process.exit(0);
}

main().catch(err => {
  emit({ error: describeError(err) });
  process.exit(1);
});
