// A real third-party Kafka 0.7 client against twlog, run by tests/integration/test_third_party07.py.
//
// node-kafka 0.2.3 (the npm package "kafka", Marcus Westin's, later Tagged's), used as its README shows,
// unmodified: a Producer that writes PRODUCE requests to one broker and partition, and a Consumer that
// polls FETCH from an offset and reports each message with the offset after it.
//
// Usage: node clients07.js LIBDIR COMMAND ARGS...
//   produce HOST PORT TOPIC LISTS SIZE   send LISTS lists of SIZE messages "<topic>-<list>-<i>"
//   consume HOST PORT TOPIC COUNT        read from offset 0 until COUNT messages came (at most 20 s)
// Each prints one JSON object on its last line; every wait is bounded.

const path = require('path')
const kafka = require(path.join(process.argv[2], 'node_modules', 'kafka'))
const [command, host, port, topic] = process.argv.slice(3, 7)
const args = process.argv.slice(7).map(Number)
const deadline = setTimeout(() => { console.log(JSON.stringify({timeout: true})); process.exit(1) }, 20000)

function done(result) {
  clearTimeout(deadline)
  console.log(JSON.stringify(result))
  process.exit(0)
}

if (command === 'produce') {
  const [lists, size] = args
  const producer = new kafka.Producer({host: host, port: Number(port), topic: topic, partition: 0})
  producer.connect().on('connect', () => {
    for (let n = 0; n < lists; n++) {
      const batch = []
      for (let i = 0; i < size; i++) batch.push(topic + '-' + n + '-' + i)
      producer.send(batch)
    }
    // PRODUCE has no answer: close once the socket has written everything.
    setTimeout(() => { producer.close(); done({published: lists * size}) }, 500)
  })
} else if (command === 'consume') {
  const [count] = args
  const messages = []
  const errors = []
  const consumer = new kafka.Consumer({host: host, port: Number(port), pollInterval: 50, maxSize: 1048576})
  consumer.on('message', (name, message, offset) => {
    messages.push([String(message), offset])
    if (messages.length >= count) setTimeout(() => done({messages: messages, errors: errors}), 300)
  })
  consumer.on('error', (code, name) => errors.push([code, name]))
  consumer.connect(() => consumer.subscribeTopic({name: topic, partition: 0}))
} else {
  console.error('unknown command ' + command)
  process.exit(2)
}
