// Drives Basin with the googleapis Node client (pinned in package.json), as its users
// do, in both ways it can authenticate with a Basin key file:
//  - token exchange: the JWT client posts a signed assertion for an access token.
//    google-auth-library sends it to Google's token URL whatever the key file's
//    token_uri says, so its transporter sends it to token_uri instead;
//  - self-signed JWT: useJWTAccessWithScope = true, no token endpoint at all.
// test/e2e's TestNodeClient starts a basin serve (answering every mutation with a
// running operation) and runs this with BASIN_ENDPOINT, BASIN_KEY_FILE,
// BASIN_PROJECT, BASIN_LOCATION, BASIN_NETWORK and BASIN_CLIENTS; without them it
// skips.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const {google, Auth} = require('googleapis');

const env = process.env;
const skip = env.BASIN_ENDPOINT ? false : 'BASIN_ENDPOINT is not set: test/e2e TestNodeClient runs this against a basin serve';

// authClient makes the client docs/clients.md shows for each flow.
function authClient(flow) {
  const key = JSON.parse(fs.readFileSync(env.BASIN_KEY_FILE, 'utf8'));
  // google-auth-library posts its assertion to Google's token URL whatever the key
  // file's token_uri says: this transporter sends it to token_uri, Basin's /token.
  class KeyTokenURI extends Auth.gaxios.Gaxios {
    request(opts) {
      if (String(opts.url) === 'https://oauth2.googleapis.com/token') opts = {...opts, url: key.token_uri};
      return super.request(opts);
    }
  }
  const auth = new google.auth.JWT({email: key.client_email, key: key.private_key, keyId: key.private_key_id,
    scopes: ['https://www.googleapis.com/auth/cloud-platform'], transporter: flow === 'jwt' ? undefined : new KeyTokenURI()});
  if (flow === 'jwt') auth.useJWTAccessWithScope = true;
  return auth;
}

// Polls a long-running operation to its end and returns its response.
async function wait(netapp, op) {
  for (let polls = 0; !op.done; polls++) {
    assert.ok(polls < 600, `operation ${op.name} not done after 60 s`);
    await new Promise((r) => setTimeout(r, 100));
    op = (await netapp.projects.locations.operations.get({name: op.name})).data;
  }
  assert.equal(op.error, undefined, `operation ${op.name} failed: ${JSON.stringify(op.error)}`);
  return op.response;
}

// Lists every page of a collection, pageSize items at a time.
async function listAll(list, params, field) {
  const items = [];
  let pages = 0;
  let pageToken;
  do {
    const {data} = await list({...params, pageSize: 1, pageToken});
    pages++;
    items.push(...(data[field] || []));
    pageToken = data.nextPageToken;
  } while (pageToken);
  return {items, pages};
}

async function status(promise) {
  try {
    await promise;
    return 200;
  } catch (e) {
    return e.status ?? e.response?.status ?? e.code;
  }
}

for (const flow of ['exchange', 'jwt']) {
  test(`googleapis netapp v1, ${flow === 'jwt' ? 'self-signed JWT' : 'token exchange'}`, {skip}, async () => {
    const auth = authClient(flow);
    const netapp = google.netapp({version: 'v1', auth, rootUrl: env.BASIN_ENDPOINT});
    const loc = netapp.projects.locations;
    const parent = `projects/${env.BASIN_PROJECT}/locations/${env.BASIN_LOCATION}`;
    const network = `projects/${env.BASIN_PROJECT}/global/networks/${env.BASIN_NETWORK}`;
    const p = `node-${flow}`;

    const l = (await loc.get({name: parent})).data;
    assert.equal(l.locationId, env.BASIN_LOCATION);
    const ll = (await loc.list({name: `projects/${env.BASIN_PROJECT}`})).data;
    assert.ok(ll.locations.some((x) => x.name === parent));

    // Pools, listed one per page; an update mask.
    for (const id of [`${p}-pool-1`, `${p}-pool-2`]) {
      const {data: op} = await loc.storagePools.create({parent, storagePoolId: id,
        requestBody: {serviceLevel: 'PREMIUM', capacityGib: '2048', network: env.BASIN_NETWORK, description: 'from Node'}});
      assert.equal((await wait(netapp, op)).state, 'READY');
    }
    const pools = await listAll((x) => loc.storagePools.list(x), {parent, filter: `name="${parent}/storagePools/${p}-*"`}, 'storagePools');
    assert.equal(pools.items.length, 2);
    assert.equal(pools.pages, 2);
    const pool = `${parent}/storagePools/${p}-pool-1`;
    await wait(netapp, (await loc.storagePools.patch({name: pool, updateMask: 'description,capacityGib',
      requestBody: {description: 'changed', capacityGib: '4096'}})).data);
    const pg = (await loc.storagePools.get({name: pool})).data;
    assert.equal(pg.description, 'changed');
    assert.equal(pg.capacityGib, '4096');
    assert.equal(pg.network, network);

    // Volumes with an export policy.
    for (const id of [`${p}-vol-1`, `${p}-vol-2`]) {
      const {data: op} = await loc.volumes.create({parent, volumeId: id, requestBody: {
        shareName: id, storagePool: `${p}-pool-1`, capacityGib: '1', protocols: ['NFSV3'],
        exportPolicy: {rules: [{allowedClients: env.BASIN_CLIENTS, accessType: 'READ_WRITE', hasRootAccess: 'true', nfsv3: true}]}}});
      assert.equal((await wait(netapp, op)).state, 'READY');
    }
    const vols = await listAll((x) => loc.volumes.list(x), {parent, filter: `name="${parent}/volumes/${p}-*"`}, 'volumes');
    assert.equal(vols.items.length, 2);
    assert.equal(vols.pages, 2);
    const vol = `${parent}/volumes/${p}-vol-1`;
    let v = (await loc.volumes.get({name: vol})).data;
    assert.equal(v.exportPolicy.rules[0].allowedClients, env.BASIN_CLIENTS);
    assert.ok(v.mountOptions.length > 0);
    await wait(netapp, (await loc.volumes.patch({name: vol, updateMask: 'description,capacityGib',
      requestBody: {description: 'changed', capacityGib: '2'}})).data);
    v = (await loc.volumes.get({name: vol})).data;
    assert.equal(v.description, 'changed');
    assert.equal(v.capacityGib, '2');

    // Snapshots, and a revert to one.
    const snaps = loc.volumes.snapshots;
    await wait(netapp, (await snaps.create({parent: vol, snapshotId: 'snap-1', requestBody: {description: 'first'}})).data);
    const snap = `${vol}/snapshots/snap-1`;
    const sl = (await snaps.list({parent: vol})).data;
    assert.deepEqual(sl.snapshots.map((s) => s.name), [snap]);
    await wait(netapp, (await snaps.patch({name: snap, updateMask: 'description', requestBody: {description: 'renamed'}})).data);
    assert.equal((await snaps.get({name: snap})).data.description, 'renamed');
    await wait(netapp, (await loc.volumes.revert({name: vol, requestBody: {snapshotId: 'snap-1'}})).data);
    await wait(netapp, (await snaps.delete({name: snap})).data);
    assert.equal(await status(snaps.get({name: snap})), 404);

    // Operations.
    const ops = (await loc.operations.list({name: parent, pageSize: 5})).data;
    assert.equal(ops.operations.length, 5);
    assert.ok(ops.nextPageToken);
    assert.equal((await loc.operations.get({name: ops.operations[0].name})).data.done, true);

    // Deletes: a volume with a snapshot only with force.
    await wait(netapp, (await snaps.create({parent: vol, snapshotId: 'snap-2', requestBody: {}})).data);
    assert.equal(await status(loc.volumes.delete({name: vol})), 400);
    await wait(netapp, (await loc.volumes.delete({name: vol, force: true})).data);
    await wait(netapp, (await loc.volumes.delete({name: `${parent}/volumes/${p}-vol-2`})).data);
    for (const id of [`${p}-pool-1`, `${p}-pool-2`]) {
      await wait(netapp, (await loc.storagePools.delete({name: `${parent}/storagePools/${id}`})).data);
    }
    assert.equal(await status(loc.storagePools.get({name: pool})), 404);
  });
}
