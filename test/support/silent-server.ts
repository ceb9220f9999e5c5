import net, { type AddressInfo } from 'node:net';

/** A TCP server that accepts connections and never answers: a server that hangs. */
export async function silentServer(): Promise<{ url: string; port: number; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const srv = net.createServer((s) => sockets.add(s));
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => srv.close(() => resolve()));
    },
  };
}
