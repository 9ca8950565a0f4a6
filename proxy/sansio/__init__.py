"""The connection core, sans-IO: protocol logic per connection, no sockets, no asyncio, no clock."""
