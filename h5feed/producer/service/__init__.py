"""``h5feed produce``: the producer service, its worker groups, and the shared fleet's front."""
