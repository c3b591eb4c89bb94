"""What the provider tests share: the four wires described alike (``wires``) and the small
helpers every adapter test needs (``helpers``)."""
