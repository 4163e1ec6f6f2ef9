"""The option groups a feed is configured with (:mod:`~h5feed.consumer.config.groups`): what the
loop core, the input kinds and the processes may import; ``h5feed.consumer.options``
assembles them into a feed's configuration."""
