import net from 'node:net';

/**
 * Starts `proxy` on a free port of 127.0.0.1 and gives the database's URL with the proxy's address
 * in it, and a close that cuts every connection it carries (`sockets`) as well as stopping it.
 */
export async function listenInPlaceOf(proxy: net.Server, sockets: ReadonlySet<net.Socket>, databaseUrl: string): Promise<{ url: string; close: () => void }> {
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const url = new URL(databaseUrl);
  url.host = `127.0.0.1:${(proxy.address() as net.AddressInfo).port}`;
  return {
    url: url.toString(),
    close: () => {
      for (const s of sockets) s.destroy();
      proxy.close();
    },
  };
}
