"""The doctor's checks, one module per link of the chain, and the small part they share (`common`,
`failures`, `deployed`, `operand`). See `gpuchain.doctor.links.common`."""
