// Driver for the official RocketMQ 5 Node.js client (rocketmq-client-nodejs@1.0.8), used by tests/grpc.
//   node driver.js '{"cmd": "send", "endpoint": "127.0.0.1:8081", "topic": "t", ...}'
// Prints one JSON object per line ({"event": ...}); the last line is {"event": "done", "ok": ...}.
'use strict';
const { Producer, SimpleConsumer, PushConsumer, ConsumeResult, FilterExpression } = require('rocketmq-client-nodejs');
const { TransactionResolution, FilterType } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const out = (event, kw = {}) => process.stdout.write(JSON.stringify({ event, ...kw }) + '\n');
const sleep = ms => new Promise(r => setTimeout(r, ms));
const quiet = { info() {}, warn() {}, error() {}, debug() {} };
// a.ak / a.sk: session credentials (RocketMQ ACL); a.tls: TLS to the endpoint
const base = a => ({ endpoints: a.endpoint, namespace: '', requestTimeout: (a.timeout || 5) * 1000, logger: quiet,
  ...(a.ak ? { sessionCredentials: { accessKey: a.ak, accessSecret: a.sk } } : {}),
  ...(a.tls ? { sslEnabled: true } : {}) });
const view = m => ({ id: m.messageId, topic: m.topic, body: m.body.toString(), tag: m.tag || null, keys: m.keys,
  group: m.messageGroup || null, props: Object.fromEntries(m.properties || []),
  delivery: m.deliveryTimestamp ? m.deliveryTimestamp.getTime() : null, t: Date.now() / 1000 });

function message(a, i) {
  const m = { topic: a.topic, body: Buffer.from(`${a.body || 'node'}-${i}`) };
  if (a.tag) m.tag = a.tag;
  if (a.keys) m.keys = a.keys;
  if (a.message_group) m.messageGroup = a.message_group;
  if (a.delay_ms) m.deliveryTimestamp = new Date(Date.now() + a.delay_ms);
  if (a.props) m.properties = new Map(Object.entries(a.props));
  return m;
}

async function send(a) {
  const p = new Producer({ ...base(a), topics: [a.topic] });
  await p.startup();
  try {
    for (let i = 0; i < (a.count || 1); i++) {
      const r = await p.send(message(a, i));
      out('sent', { id: r.messageId, i, t: Date.now() / 1000 });
    }
  } finally { await p.shutdown(); }
}

async function tx(a) {
  let checked = null;
  const seen = new Promise(resolve => { checked = resolve; });
  const checker = {
    async check(m) {
      out('checked', { id: m.messageId, body: m.body.toString(), t: Date.now() / 1000 });
      checked();
      return a.check_answer === 'rollback' ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
    },
  };
  const p = new Producer({ ...base(a), topics: [a.topic], checker });
  await p.startup();
  try {
    const t = p.beginTransaction();
    const r = await p.send(message(a, 0), t);
    out('sent', { id: r.messageId, t: Date.now() / 1000 });
    if (a.mode === 'commit') await t.commit();
    else if (a.mode === 'rollback') await t.rollback();
    else {
      const ok = await Promise.race([seen.then(() => true), sleep((a.wait_check || 30) * 1000).then(() => false)]);
      if (!ok) out('no-check');
      await sleep(1000);
    }
    out('decided', { mode: a.mode });
  } finally { await p.shutdown(); }
}

// `filter`: a tag expression, or with `sql` a SQL92 one.
function subscription(a) {
  return a.sql ? new FilterExpression(a.filter, FilterType.SQL) : (a.filter || '*');
}

async function simple(a) {
  const c = new SimpleConsumer({ ...base(a), consumerGroup: a.group, awaitDuration: (a.await || 2) * 1000,
    subscriptions: new Map([[a.topic, subscription(a)]]) });
  await c.startup();
  try {
    const end = Date.now() + (a.wait || 20) * 1000;
    const receive = async n => {
      while (Date.now() < end) {
        const got = await c.receive(n, (a.invisible || 10) * 1000);
        if (got.length) return got;
      }
      return [];
    };
    if (a.lifecycle) {
      const [m] = await receive(1);
      if (!m) return out('timeout');
      out('received', view(m));
      const asked = performance.now(); // before the request: the broker counts the new duration from a later moment
      await c.changeInvisibleDuration(m, (a.extend || 4) * 1000);
      out('extended', { t: Date.now() / 1000 });
      const [again] = await receive(1);
      if (!again) return out('timeout');
      out('redelivered', { ...view(again), since_asked: (performance.now() - asked) / 1000 });
      await c.ack(again);
      out('acked', { t: Date.now() / 1000 });
      return;
    }
    let got = 0;
    while (got < (a.expect || 1) && Date.now() < end) {
      for (const m of await receive(a.batch || 16)) {
        got++;
        out('received', view(m));
        if (a.ack !== false) await c.ack(m);
      }
    }
  } finally { await c.shutdown(); }
}

async function push(a) {
  const seen = new Map();
  let finish = null;
  const done = new Promise(r => { finish = r; });
  const messageListener = {
    consume(m) {
      const n = (seen.get(m.messageId) || 0) + 1;
      seen.set(m.messageId, n);
      out('received', view(m));
      if (a.fail_first && n === 1) return ConsumeResult.FAILURE;
      const need = a.fail_first ? 2 : 1;
      if ([...seen.values()].filter(v => v >= need).length >= (a.expect || 1)) finish(true);
      return ConsumeResult.SUCCESS;
    },
  };
  const c = new PushConsumer({ ...base(a), consumerGroup: a.group, messageListener, longPollingTimeout: 2000,
    subscriptions: new Map([[a.topic, subscription(a)]]) });
  await c.startup();
  try {
    const ok = await Promise.race([done, sleep((a.wait || 30) * 1000).then(() => false)]);
    if (!ok) out('timeout');
    await sleep(500);
  } finally { await c.shutdown(); }
}

(async () => {
  const a = JSON.parse(process.argv[2]);
  try {
    await ({ send, tx, simple, push })[a.cmd](a);
    out('done', { ok: true });
    process.exit(0);
  } catch (e) {
    out('done', { ok: false, error: String(e && e.stack || e) });
    process.exit(1);
  }
})();
