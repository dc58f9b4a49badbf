"""A training run: its configuration, its batches, its loop, its validation, its checkpoints.

    configs.py       the training configurations: "quick", "full" and "recipe" (read from ../recipes/)
    batches.py       Multi30k assembled for training: the datasets, their vocabularies, one epoch's batches
    loop.py          the whole run, `train(config, out_dir)`: device, mixed precision, logs, resume, averaging
    validation.py    the validation loss, perplexity and accuracy, by teacher forcing
    checkpoints.py   a model saved with its settings and vocabularies, and loaded back

The commands `python -m transformer_course.train`, `evaluate`, `reproduce` and `pretrain_finetune` (modules of
the package itself) are built from these. The components they train (model, training steps, schedules, decoding)
are the package's modules named by their notebooks' subjects. Nothing is re-exported here: import a module
(`from transformer_course.run.loop import train`); `load_checkpoint` and `save_checkpoint` are also at the
package's top level (`transformer_course.load_checkpoint`).
"""
