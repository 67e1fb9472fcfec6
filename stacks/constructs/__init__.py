"""One construct per capability; ``stacks.mailstep_stack`` composes them."""
